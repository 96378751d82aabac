"""taulib.progress: the progress line of tau-collect and tau-bundle-fetch (silent unless asked for or on a terminal,
throttled, ended with a newline), and taulib.signals.deferred, which keeps a stop signal from cutting a clean-up
short. In process, with a clock the test moves and a stream that says whether it is a terminal."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import PYTHON, ROOT
from taulib import progress, signals


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def meter(tty: bool = True, show: bool | None = None, **kwargs) -> tuple[progress.Meter, Stream, Clock]:
    stream, clock = Stream(tty), Clock()
    kwargs.setdefault("unit", "rows")
    return progress.Meter("collecting", show=show, stream=stream, clock=clock, **kwargs), stream, clock


def test_a_meter_on_something_that_is_not_a_terminal_writes_nothing_at_all():
    m, stream, clock = meter(tty=False, total_count=10)
    for _ in range(10):
        clock.now += 1
        m.add(1, 100)
    m.close()
    assert stream.getvalue() == ""


def test_no_progress_silences_a_terminal_and_progress_forces_lines_into_a_pipe():
    quiet, stream, clock = meter(tty=True, show=False, total_count=4)
    clock.now += 5
    quiet.add(4)
    quiet.close()
    assert stream.getvalue() == ""
    forced, stream, clock = meter(tty=False, show=True, total_count=4)
    clock.now += 2
    forced.add(2, 1 << 20)
    clock.now += 2
    forced.add(2, 1 << 20)
    forced.close()
    lines = stream.getvalue().split("\n")
    assert lines[-1] == "" and "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()
    assert lines[:-1] == ["collecting: 2/4 rows (50%), 1.0 MiB, 1 rows/s, 0.5 MiB/s, ETA 0:00:02",
                          "collecting: 4/4 rows (100%), 2.0 MiB, 1 rows/s, 0.5 MiB/s, ETA 0:00:00",
                          "collecting: 4/4 rows (100%), 2.0 MiB, 1 rows/s, 0.5 MiB/s, ETA 0:00:00"]


def test_a_terminal_is_redrawn_in_place_at_most_every_interval_and_the_last_line_ends_with_a_newline():
    m, stream, clock = meter(tty=True, total_count=1000)
    for _ in range(100):  # 100 updates within 0.1 s: none is drawn (the first waits for an interval)
        clock.now += 0.001
        m.add(1)
    assert stream.getvalue() == ""
    clock.now += progress.INTERVAL
    m.add(1)
    clock.now += progress.INTERVAL / 2
    m.add(1)  # too soon after the last one
    assert stream.getvalue().count("\r") == 1
    clock.now += progress.INTERVAL
    m.add(898)
    m.close()
    out = stream.getvalue()
    draws = out.split("\r")[1:]
    assert len(draws) == 3 and all(d.endswith("\x1b[K") for d in draws[:-1]) and draws[-1].endswith("\x1b[K\n")
    assert draws[0].startswith("collecting: 101/1,000 rows (10%), 0.0 MiB, ")
    assert draws[-1].startswith("collecting: 1,000/1,000 rows (100%), ")
    assert out.count("\n") == 1


def test_a_fetch_line_counts_bytes_of_their_total_then_files_and_says_the_time_left():
    m, stream, clock = meter(tty=False, show=True, unit="files", total_count=20, total_bytes=100 << 20)
    m.label = "fetching g1"
    clock.now += 4
    m.add(5, 25 << 20)
    assert stream.getvalue() == ("fetching g1: 25.0/100.0 MiB (25%), 5/20 files, 6.2 MiB/s, ETA 0:00:12\n")


def test_a_meter_is_called_with_bytes_by_the_transfer_threads():
    import threading

    m, stream, clock = meter(tty=False, show=True, unit="files", total_bytes=8_000_000)
    threads = [threading.Thread(target=lambda: [m(1000) for _ in range(1000)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    clock.now += 2
    m.close()
    assert m.nbytes == 8_000_000
    assert stream.getvalue() == "collecting: 7.6/7.6 MiB (100%), 0 files, 3.8 MiB/s, ETA 0:00:00\n"


def test_a_meter_that_did_nothing_and_drew_nothing_writes_nothing_when_closed():
    m, stream, _ = meter(tty=True, total_count=10)
    m.close()
    assert stream.getvalue() == ""


def test_whether_to_show_progress_is_the_choice_when_given_else_whether_stderr_is_a_terminal():
    assert progress.enabled(None, Stream(True)) is True
    assert progress.enabled(None, Stream(False)) is False
    assert progress.enabled(True, Stream(False)) is True
    assert progress.enabled(False, Stream(True)) is False
    closed = open(os.devnull, "w")
    closed.close()
    assert progress.enabled(None, closed) is False  # a closed stderr is no terminal


def test_importing_the_progress_module_loads_nothing_but_the_standard_library():
    code = ("import sys; import taulib; before = set(sys.modules); import taulib.progress; "
            "print(sorted(m for m in set(sys.modules) - before if m != 'taulib.progress'))")
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    loaded = eval(proc.stdout)
    assert all(m.split(".")[0] in sys.stdlib_module_names for m in loaded), loaded


# -- taulib.signals.deferred ------------------------------------------------------------------------------------

class Stop(BaseException):
    pass


@pytest.fixture
def stop_handler():
    def raise_stop(signum, _frame):
        raise Stop(signum)

    previous = signal.signal(signal.SIGTERM, raise_stop)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_signal_during_a_deferred_block_takes_effect_when_the_block_ends(stop_handler):
    done = []
    # whatever an earlier test of this process left as SIGINT's handler, the block puts it back
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGHUP)}
    with pytest.raises(Stop) as caught:
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            done.append("clean-up finished")
    assert done == ["clean-up finished"]
    assert caught.value.args == (signal.SIGTERM,)
    assert {signum: signal.getsignal(signum) for signum in before} == before  # every handler is back


def test_a_deferred_block_without_a_signal_changes_nothing(stop_handler):
    before = signal.getsignal(signal.SIGTERM)
    with signals.deferred():
        pass
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_deferred_block_in_a_thread_other_than_the_main_one_is_a_plain_block():
    import threading

    seen = []
    t = threading.Thread(target=lambda: seen.append(signals.deferred().__enter__() is None))
    t.start()
    t.join()
    assert seen == [True]


def test_a_process_stopped_inside_a_deferred_block_exits_by_that_signal_after_it():
    code = ("import os, signal, sys\nfrom taulib import signals\n"
            "with signals.deferred():\n    os.kill(os.getpid(), signal.SIGTERM)\n    print('finished', flush=True)\n"
            "print('never', flush=True)\n")
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert (proc.returncode, proc.stdout) == (-signal.SIGTERM, "finished\n")


# -- taulib.signals.relay_to_main -------------------------------------------------------------------------------

SLEEPER = """
import os, signal, sys, threading, time
from taulib import signals
idle = threading.Event()
for _ in range(3):  # idle threads the kernel may hand a signal to (pyarrow's pool, transfer threads)
    threading.Thread(target=idle.wait, daemon=True).start()
def stop(signum, _frame):
    os._exit(100 + signum)  # as a tau command ends once stopped: before shutdown gives the signals their default
for signum in signals.STOPS:
    signal.signal(signum, stop)
print(signals.relay_to_main() if sys.argv[1] == "relay" else "bare", flush=True)
time.sleep(120)
"""


def sleeper(mode: str) -> subprocess.Popen:
    proc = subprocess.Popen([PYTHON, "-c", SLEEPER, mode], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline() == ("True\n" if mode == "relay" else "bare\n")
    return proc


@pytest.mark.parametrize("round_", range(60))  # without the relay, about 1 round in 30 hangs on Linux 6.18
def test_a_stop_signal_ends_a_main_thread_that_sleeps_beside_idle_threads_at_once(round_):
    proc = sleeper("relay")
    time.sleep(0.05)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGTERM):  # one lands in the main thread
        proc.send_signal(signum)  # or none does: the kernel may pick the idle ones for all four
    try:
        code = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("the main thread slept on with a signal pending") from None
    assert code in (100 + signal.SIGHUP, 100 + signal.SIGINT, 100 + signal.SIGTERM), code


def test_the_relay_is_set_up_once_and_never_from_another_thread_and_leaves_anothers_wakeup_fd_alone():
    import threading

    code = ("import signal, threading\nfrom taulib import signals\nout = []\n"
            "t = threading.Thread(target=lambda: out.append(signals.relay_to_main())); t.start(); t.join()\n"
            "first = signals.relay_to_main(); fd = signal.set_wakeup_fd(-1); signal.set_wakeup_fd(fd)\n"
            "again = [signals.relay_to_main() for _ in range(50)]; after = signal.set_wakeup_fd(-1)\n"
            "print(out[0], first, set(again), after == fd, signal.getsignal(signals.WAKE).__name__,"
            " sorted(t.name for t in threading.enumerate()), len(os.listdir('/proc/self/fd')))\n")
    proc = subprocess.run([PYTHON, "-c", "import os\n" + code], capture_output=True, text=True, cwd=ROOT, timeout=30)
    words = proc.stdout.split()
    assert " ".join(words[:6]) == "False True {False} True _woken ['MainThread',", proc.stderr
    assert words[6] == "'tau-signal-relay']" and int(words[7]) < 12, proc.stdout  # no pipe left behind
    assert threading.current_thread() is threading.main_thread()


def test_every_command_relays_signals_to_its_main_thread():
    code = ("import signal, threading\nfrom taulib.cli import common\ncommon._catch_stop_signals()\n"
            "print(signal.set_wakeup_fd(-1) != -1, [t.name for t in threading.enumerate()])\n")
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert proc.stdout == "True ['MainThread', 'tau-signal-relay']\n", proc.stderr
