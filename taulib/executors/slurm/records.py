"""Slurm's own files in a run directory (tau-run(5) lists them). Pure: names only.

  submissions/<id>/job.sh                       the submission's job script (an sbatch array)
  submissions/<id>/slurm-JOB_TASK.out           an array task's own output (appended across requeues)
  collections/<id>/job.sh job-rK.sh             a collection's CPU job, and the K-th rerun of its unfinished tasks
  collections/<id>/slurm-JOB_TASK.out           a collection task's output
"""

from __future__ import annotations

OUTPUT = "slurm-%A_%a.out"  # an array task's output, as sbatch --output names it in a folder


def submission_script(sub: str) -> str:
    """The job script of a submission."""
    return f"submissions/{sub}/job.sh"


def collection_script(collection: str, rerun: int = 0) -> str:
    """The job script of a collection's CPU job, or of its `rerun`-th rerun."""
    return f"collections/{collection}/job.sh" if not rerun else f"collections/{collection}/job-r{rerun}.sh"


def task_output(sub: str, job_id: str, task_index: int) -> str:
    """The output file Slurm wrote for one array task of a submission's job."""
    return f"submissions/{sub}/slurm-{job_id}_{task_index}.out"


def collection_task_output(collection: str, job_id: str, task_index: int) -> str:
    """The output file Slurm wrote for one array task of a collection's job."""
    return f"collections/{collection}/slurm-{job_id}_{task_index}.out"
