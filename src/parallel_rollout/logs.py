"""One log for every process of a run: workers and the pool's Manager forward their log
records to the main process, where ``run.log`` and the console take them.

::

    worker / Manager process                          main process
    logging ─► ForwardHandler ── its own pipe ──► LogCollector thread
                 (a QueueHandler)                    └─► logging.getLogger(name).handle(record)
                                                           ├─► run.log   (the Runner's handler)
                                                           └─► console   (ConsoleHandler: clears
                                                                          and redraws the bar)

* **Children** are spawned, so they start with no handler at all: without this their INFO
  lines were lost and their warnings went to stderr through ``logging.lastResort``, across
  the progress bar and never into ``run.log``. ``run_child`` (a worker's process target) and
  ``ChildLogging.install`` (the Manager's initializer) put a ``ForwardHandler`` on the root
  logger and copy the main process's levels, so a child logs what the main process would.
* **One pipe per child**, not one ``multiprocessing.Queue`` for all: a Queue's writers share
  a lock, and a worker SIGKILLed mid-write (task timeouts kill whole process trees) would
  leave it held and block every other process's logging, and their exit. A kill cuts only
  its own pipe; the collector reads EOF and forgets it.
* **In the main process** a record keeps its logger name and process name. A record of the
  project's loggers (``parallel_rollout.*``) is handled by that logger; any other (a plugin's
  own logger, a library's warning) by ``parallel_rollout``, so it reaches ``run.log`` too.
* **The console** (``console_logging``, the CLI's) is the project logger's own handler, and
  that logger does not propagate to the root: a root handler a library installs (its
  ``basicConfig``) neither doubles the run's lines nor ignores ``-q``.
* **Levels** (``-v``/``-q``, see ``set_verbosity``): the project's loggers at INFO and other
  libraries at WARNING by default; ``-v`` DEBUG and INFO, ``-vv`` DEBUG for everyone. ``-q``
  and ``-qq`` only quiet the console (WARNING, ERROR): ``run.log`` always keeps INFO.

* **A console whose reader went away** (``parallel-rollout run … | head -1``, a closed ssh
  session's pipe) loses its lines, never the run: the first write that meets the closed pipe
  points that stream at /dev/null (``lose_output``, Python's documented way: the signal
  module's note on SIGPIPE) and the run goes on to its own exit status. The console's
  handler, the progress bar (``PipeSafeStream``) and the CLI's lines (``say``) do so; a
  BrokenPipeError left to click would exit 1 (aborted: resume) after a finished run, one
  left to the interpreter's flush at exit 120, and one in the progress bar stop the run. A
  stream closed before the start (``>&-``) is /dev/null (``devnull_for_closed_streams``).
  So is a console on a full disk (a scheduler's log file: ENOSPC, over quota, EIO,
  ``output_lost``): the run folder, elsewhere, keeps everything (run.log too).

Ray actors (``--backend ray``) are not children: their warnings and errors travel to the
driver with what it takes from them anyway (``backends.ray_logs``), and ``dispatch`` there.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import logging.handlers
import os
import sys
import threading
from multiprocessing.connection import Connection, Pipe, wait
from typing import Any, Callable, Iterator

#: the project's logger: every module logs under it
PROJECT_LOGGER = "parallel_rollout"
#: run.log's line: the process name says which worker (rollout-worker-3) or the pool (vm-pool)
RUN_LOG_FORMAT = "%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s"
#: seconds the collector waits for the last records of children that have not exited
_DRAIN_S = 0.5


class ForwardHandler(logging.handlers.QueueHandler):
    """A child's handler: each record, its message formatted (arguments and tracebacks made
    text, so it pickles), sent down the child's own pipe to the main process."""

    def __init__(self, conn: Connection) -> None:
        super().__init__(queue=None)  # type: ignore[arg-type]
        self.conn = conn

    def enqueue(self, record: logging.LogRecord) -> None:
        """Send the record; a main process that is gone (its pipe closed) drops it."""
        try:
            self.conn.send(record)
        except (OSError, ValueError):
            pass


class ChildLogging:
    """What a child needs to forward its logs: the write end of its pipe and the main
    process's levels. Made by ``LogCollector.child``; picklable into a spawned process."""

    def __init__(self, conn: Connection, project_level: int, other_level: int) -> None:
        self.conn = conn
        self.project_level = project_level
        self.other_level = other_level

    def install(self, process_name: str | None = None) -> None:
        """In the child: forward every record from the main process's levels up."""
        if process_name is not None:
            import multiprocessing

            multiprocessing.current_process().name = process_name
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.addHandler(ForwardHandler(self.conn))
        root.setLevel(self.other_level)
        logging.getLogger(PROJECT_LOGGER).setLevel(self.project_level)

    def close(self) -> None:
        """In the main process, once the child started: its copy of the write end."""
        self.conn.close()


def run_child(logs: ChildLogging, target: Callable[..., Any], *args: Any) -> Any:
    """A spawned process's target: install log forwarding, then run ``target(*args)``."""
    logs.install()
    return target(*args)


class LogCollector:
    """One thread in the main process that reads every child's log pipe and hands each record
    to this process's loggers. ``child()`` before each spawn, ``close()`` after the last child
    exited (it reads what they sent last)."""

    def __init__(self) -> None:
        self._readers: list[Connection] = []
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._closing = False
        #: how its children's warnings are said: as the thread that made it says its own
        self._rewrite = thread_rewrite()
        self._thread = threading.Thread(target=self._serve, name="log-collector", daemon=True)
        self._thread.start()

    def child(self) -> ChildLogging:
        """A new pipe for one child; pass the result to it, then ``close()`` it here."""
        reader, writer = Pipe(duplex=False)
        with self._lock:
            self._readers.append(reader)
        os.write(self._wake_w, b"x")
        project = logging.getLogger(PROJECT_LOGGER)
        return ChildLogging(writer, project.getEffectiveLevel(), logging.getLogger().getEffectiveLevel())

    def close(self) -> None:
        """Read what the children sent before they exited, then stop the thread."""
        self._closing = True
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=10)
        for conn in self._readers:
            conn.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _serve(self) -> None:
        _said.rewrite = self._rewrite
        while True:
            with self._lock:
                readers = list(self._readers)
            if self._closing:
                self._drain(readers)
                return
            for ready in wait([*readers, self._wake_r]):
                if ready == self._wake_r:
                    os.read(self._wake_r, 4096)
                else:
                    self._read(ready)

    def _drain(self, readers: list[Connection]) -> None:
        # The children have exited (or were killed): each pipe holds its last records, then
        # EOF. A child still alive (a Manager that would not stop) gets _DRAIN_S.
        while readers:
            ready = wait(readers, timeout=_DRAIN_S)
            if not ready:
                return
            for conn in ready:
                if not self._read(conn):
                    readers.remove(conn)

    def _read(self, conn: Any) -> bool:
        """Handle one record from ``conn``; False (and forget the pipe) at its end."""
        try:
            record = conn.recv()
        except (EOFError, OSError):
            with self._lock:
                if conn in self._readers:
                    self._readers.remove(conn)
            conn.close()
            return False
        dispatch(record)
        return True


def dispatch(record: logging.LogRecord, rewrite: Callable[[str], str] | None = None) -> None:
    """Handle a child's record in this process: by its own logger when it is one of the
    project's, else by the project's logger (so run.log has it too); said through ``rewrite``,
    or without one through this thread's (``reworded``)."""
    name = record.name
    own = name == PROJECT_LOGGER or name.startswith(PROJECT_LOGGER + ".")
    _reword(record, rewrite or thread_rewrite())
    logging.getLogger(name if own else PROJECT_LOGGER).handle(record)


#: the rewrite (``reworded``) of the thread's records, and of a collector's thread: the one of
#: the thread that made it, so runs in two threads each say their own
_said = threading.local()
#: the record factory ``reworded`` installed, and how many ``reworded`` use it
_FACTORY: list[Any] = []
_FACTORY_LOCK = threading.Lock()


def thread_rewrite() -> Callable[[str], str] | None:
    """The rewrite ``reworded`` set for this thread (None: none): one that hands records to
    ``dispatch`` later, from another thread, keeps it (``LogCollector``, a Ray run's driver)."""
    return getattr(_said, "rewrite", None)


def _reword(record: logging.LogRecord, rewrite: Callable[[str], str] | None) -> None:
    """The record's message said through ``rewrite``, when it is a project's warning or error."""
    if rewrite is None or record.levelno < logging.WARNING or not record.name.startswith(PROJECT_LOGGER):
        return
    try:
        record.msg, record.args = rewrite(record.getMessage()), None
    except Exception:  # noqa: BLE001 - a record whose arguments do not format is said as it is
        pass


@contextlib.contextmanager
def reworded(rewrite: Callable[[str], str]) -> Iterator[None]:
    """While it lasts, the project's warnings and errors of this thread, and those the
    children of a ``LogCollector`` made meanwhile forward, are said through ``rewrite``:
    ``run()`` says the CLI's flags in them as its keywords (``api.as_called``)."""
    with _FACTORY_LOCK:
        if not _FACTORY:
            previous = logging.getLogRecordFactory()

            def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
                record = previous(*args, **kwargs)
                _reword(record, getattr(_said, "rewrite", None))
                return record

            logging.setLogRecordFactory(make)
            _FACTORY[:] = [make, previous, 0]
        _FACTORY[2] += 1
    outer, _said.rewrite = getattr(_said, "rewrite", None), rewrite
    try:
        yield
    finally:
        _said.rewrite = outer
        with _FACTORY_LOCK:
            _FACTORY[2] -= 1
            if not _FACTORY[2]:
                make, previous, _ = _FACTORY
                if logging.getLogRecordFactory() is make:  # not replaced since by someone else's
                    logging.setLogRecordFactory(previous)
                _FACTORY.clear()


#: ``log.error(message, extra=NOT_ON_CONSOLE)``: for run.log, not the console
NOT_ON_CONSOLE = {"console": False}


class ConsoleHandler(logging.Handler):
    """The console's handler: writes to whatever ``sys.stderr`` is now (a second ``main()``
    in one process, CliRunner or an embedding program, swaps it), through ``tqdm.write`` once
    tqdm is loaded, which clears the progress bar, writes the line and redraws the bar."""

    def emit(self, record: logging.LogRecord) -> None:
        """Write one line without breaking the progress bar; a record logged with
        ``extra=NOT_ON_CONSOLE`` is the run's file's only (the CLI prints it itself)."""
        if not getattr(record, "console", True):
            return
        try:
            line = self.format(record)
            tqdm_module = sys.modules.get("tqdm")
            if tqdm_module is not None:
                tqdm_module.tqdm.write(line, file=sys.stderr)
            else:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
        except OSError as exc:
            if not output_lost(exc):
                self.handleError(record)
                return
            lose_output(sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)


#: what a console write that fails with these lost is its line, not the run: where the output
#: goes is full (a scheduler's log file on a full disk, over quota, past its size limit) or broken
_LOST_ERRNOS = frozenset({errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def output_lost(exc: OSError) -> bool:
    """Whether ``exc``, raised by a write to stdout or stderr, says the output is lost
    (a reader gone, a full disk): the stream is then pointed at /dev/null (``lose_output``)."""
    return isinstance(exc, BrokenPipeError) or exc.errno in _LOST_ERRNOS


def lose_output(stream: Any) -> None:
    """Point ``stream`` (stdout or stderr), whose reader went away, at /dev/null: what is
    written to it from now on, and what its buffer holds for the flush at exit, is lost
    instead of raising BrokenPipeError again. A stream with no file under it (CliRunner's)
    has nothing to redirect."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def written(write: Callable[[], Any], stream: Any) -> OSError | None:
    """``write()`` to ``stream`` (stdout or stderr); an output lost (``output_lost``) points the
    stream at /dev/null (``lose_output``) and is returned, any other error raised."""
    try:
        write()
    except OSError as exc:
        if not output_lost(exc):
            raise
        lose_output(stream)
        return exc
    return None


def devnull_for_closed_streams() -> None:
    """Open /dev/null (inheritable) on each of the descriptors 0, 1 and 2 that the program
    started with closed (``>&-``, ``2>&-``): else the first file the run opens takes that
    number (the run folder's lock, a worker's pipe), and what writes to fd 1 or 2 there (a
    library, a child process) writes into it. Python's ``sys.stdout`` stays None."""
    fd = os.open(os.devnull, os.O_RDWR)
    while fd <= 2:  # open takes the lowest free number: each closed one in turn
        os.set_inheritable(fd, True)
        fd = os.open(os.devnull, os.O_RDWR)
    os.close(fd)


def say(text: str, err: bool = False, answer: bool = False) -> None:
    """``click.echo`` for every command: a reader gone or a full disk loses the line (a run's
    summary, its resume hint, a warning at its start), not the run nor the exit status.
    ``answer``: the line is the command's whole answer (``runs list``'s table or JSON), which a
    full disk must not turn into an empty list read as "no runs": exit 1 then, said on stderr
    (a reader gone, ``runs list | head -1``, is still no error)."""
    import click

    lost = written(lambda: click.echo(text, err=err), sys.stderr if err else sys.stdout)
    if answer and lost is not None and not isinstance(lost, BrokenPipeError):
        raise click.ClickException(f"the answer could not be written to standard output: "
                                   f"{lost.strerror or lost}") from None


def shown_on_stderr(show: Callable[[], None]) -> Callable[[], None]:
    """``show`` (click's printing of a usage error to stderr) losing its lines to an output
    gone, as ``say`` does: the status stays the error's own (2), not a traceback's 1."""
    def guarded() -> None:
        written(show, sys.stderr)
    return guarded


def flush_stdout() -> None:
    """Flush what this process printed before it ends (``os._exit`` flushes nothing): a
    stdout closed when the program started (``>&-``: None) has nothing to flush, and one
    whose reader went away loses it."""
    if sys.stdout is not None:
        written(sys.stdout.flush, sys.stdout)


class PipeSafeStream:
    """The progress bar's stream (stderr): a write that meets a closed pipe loses the bar
    (``lose_output``) instead of raising into the engine's thread, which updates it. Equal
    to the stream it wraps, so that ``tqdm.write`` of the console's lines to that stream
    still clears the bar first."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        """Write ``text``, or lose it with the rest once the reader is gone."""
        try:
            return self.stream.write(text)
        except OSError as exc:
            if not output_lost(exc):
                raise
            lose_output(self.stream)
            return len(text)

    def flush(self) -> None:
        """Flush, or lose what is buffered once the reader is gone."""
        written(self.stream.flush, self.stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

    def __eq__(self, other: object) -> bool:
        return other is self or other is self.stream

    def __hash__(self) -> int:
        return hash(self.stream)


class _ConsoleFormatter(logging.Formatter):
    """The message alone from the main process; a child's says which process it is."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        if record.processName != "MainProcess":
            return f"[{record.processName}] {message}"
        return message


def console_logging(verbosity: int = 0) -> None:
    """Log to the console at the level of ``verbosity`` (``-v`` count minus ``-q`` count);
    installed once per process, the level updated on each call.

    The project's records stop at its logger (they do not propagate to the root's handlers):
    its console handler and run.log are their only way out. A library that configures the
    root logger (bm25s's ``logging.warning()`` at import runs ``basicConfig``) would
    otherwise print each of them a second time (``INFO:parallel_rollout:…``), past ``-q``."""
    project = logging.getLogger(PROJECT_LOGGER)
    handler = next((h for h in project.handlers if isinstance(h, ConsoleHandler)), None)
    if handler is None:
        handler = ConsoleHandler()
        handler.setFormatter(_ConsoleFormatter("%(message)s"))
        project.addHandler(handler)
    project.propagate = False
    set_verbosity(verbosity, handler)


def set_verbosity(verbosity: int, console: logging.Handler | None = None) -> None:
    """The levels of ``verbosity``: -2 errors only on the console, -1 warnings, 0 INFO of the
    project and WARNING of other libraries, 1 DEBUG of the project and INFO of others, 2
    DEBUG of everything. The project's logger never drops INFO: run.log keeps it."""
    console_level = {-2: logging.ERROR, -1: logging.WARNING, 0: logging.INFO}.get(
        max(-2, verbosity), logging.DEBUG)
    if console is not None:
        console.setLevel(console_level)
    logging.getLogger(PROJECT_LOGGER).setLevel(min(console_level, logging.INFO))
    logging.getLogger().setLevel(logging.DEBUG if verbosity >= 2 else
                                 logging.INFO if verbosity == 1 else logging.WARNING)
