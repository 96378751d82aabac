"""Slurm: the sbatch script (`script`), strict parsing of squeue/sacct/sbatch text (`parse`), the commands
themselves with timeouts (`commands`), and observation of recorded jobs (`observe`)."""
