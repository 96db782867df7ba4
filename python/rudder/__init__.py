"""Rudder from Python: controlled text generation with diffusion language models.

A thin ctypes binding over the C embedding API (rudder.h in librudder.so); nothing to compile.

    import rudder

    gen = rudder.Generator("examples/recipes/length_span_discrete.json")
    for sample in gen.generate(samples=4, seed=1, on_step=lambda p: print(p.step, p.texts[0]), step_texts=True):
        print(sample.text, sample.controls["length"].satisfied)

librudder.so is found through $RUDDER_LIBRARY, then next to this package as `cmake --install` lays it out
(<prefix>/<libdir>/rudder/python/rudder -> <prefix>/<libdir>/librudder.so), then in a checkout's build tree
(python/rudder -> build/lib/librudder.so, so `PYTHONPATH=python` works after `make`), then the system's library path.
Errors pickle (a Dask worker's InvalidRecipe arrives as one, with its issues).
Generators on different Python threads run at the same time (ctypes releases the GIL during a call).
"""

import ctypes
import json
import os
import select
import signal
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

__all__ = ["Generator", "Sample", "Verdict", "Progress", "Error", "Cancelled", "Interrupted", "InvalidRecipe", "Issue",
           "library_version"]

# Status codes (rudder.h).
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_CANCELLED = 5
ERR_INVALID_RECIPE = 100
ERR_GENERATION_FAILED = 101
ERR_BUSY = 102


class Error(Exception):
    """A failed call: `status` is the C API's code, the message is its text."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status

    def __reduce__(self):  # pickled with its status (Dask sends a worker's errors back this way)
        return (type(self), (self.status, str(self)))


@dataclass(frozen=True)
class Issue:
    """One problem of a recipe: where (a JSON pointer into the recipe) and what."""
    pointer: str
    message: str


class InvalidRecipe(Error):
    """The recipe, its model or a controller's params are invalid. `issues` lists each problem (Issue: pointer,
    message), as the message does, one a line."""

    @property
    def issues(self) -> List[Issue]:
        out = []
        for line in str(self).splitlines()[1:]:
            pointer, sep, message = line.partition(": ")
            if sep and (pointer.startswith("/") or pointer == ""):
                out.append(Issue(pointer, message))
            elif out:  # a message that runs over more lines
                out[-1] = Issue(out[-1].pointer, out[-1].message + "\n" + line)
        return out


class Cancelled(Error):
    """The step callback asked to stop. The generator stays usable; `samples` holds those finished before."""

    def __init__(self, status: int, message: str, samples: Optional[List["Sample"]] = None):
        super().__init__(status, message)
        self.samples = samples if samples is not None else []

    def __reduce__(self):
        return (type(self), (self.status, str(self), self.samples))


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during generate(): the run stopped within a step. `samples` holds those finished before it; the
    generator stays usable. A KeyboardInterrupt, so code that does not know Rudder stops as it would."""

    def __init__(self, samples: List["Sample"]):
        super().__init__(f"interrupted after {len(samples)} finished samples")
        self.samples = samples

    def __reduce__(self):
        return (type(self), (self.samples,))


def _error(status: int, message: str) -> Error:
    kind = {ERR_INVALID_RECIPE: InvalidRecipe, ERR_CANCELLED: Cancelled}.get(status, Error)
    return kind(status, message)


# ----- the C declarations ---------------------------------------------------------------------------------------


class _Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("model", ctypes.c_char_p), ("model_path", ctypes.c_char_p),
                ("plugin_path", ctypes.c_char_p), ("base_dir", ctypes.c_char_p)]


class _Progress(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("batch", ctypes.c_int64), ("batches", ctypes.c_int64),
                ("step", ctypes.c_int64), ("steps", ctypes.c_int64), ("t", ctypes.c_double),
                ("samples_done", ctypes.c_int64), ("samples_total", ctypes.c_int64),
                ("texts", ctypes.POINTER(ctypes.c_char_p)), ("n_texts", ctypes.c_int64)]


_PROGRESS_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(_Progress), ctypes.c_void_p)
_LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_char_p, ctypes.c_void_p)


class _Limits(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("max_steps", ctypes.c_int64), ("max_samples", ctypes.c_int64),
                ("max_batch_size", ctypes.c_int64), ("max_length", ctypes.c_int64), ("max_memory_mb", ctypes.c_int64)]


class _GenerateOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("samples", ctypes.c_int64), ("override_seed", ctypes.c_int32),
                ("seed", ctypes.c_uint64), ("on_progress", _PROGRESS_FN), ("user_data", ctypes.c_void_p),
                ("progress_text", ctypes.c_int32)]


class _VerdictInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("label", ctypes.c_char_p), ("satisfied", ctypes.c_int32),
                ("has_score", ctypes.c_int32), ("score", ctypes.c_double), ("detail", ctypes.c_char_p)]


def _find_library() -> str:
    explicit = os.environ.get("RUDDER_LIBRARY")
    if explicit:
        return explicit
    # Normalised before use: in the build tree this package is reached through a link (<libdir>/rudder/python/rudder),
    # and ".." after a link would climb from where the link points.
    here = os.path.dirname(os.path.abspath(__file__))
    installed = os.path.normpath(os.path.join(here, "..", "..", "..", "librudder.so"))
    if os.path.exists(installed):
        return installed
    checkout = os.path.normpath(os.path.join(here, "..", "..", "build", "lib", "librudder.so"))
    if os.path.exists(checkout):
        return checkout
    return "librudder.so"  # the system's library path (ldconfig, LD_LIBRARY_PATH)


def _load() -> ctypes.CDLL:
    found = _find_library()
    try:
        lib = ctypes.CDLL(found)
    except OSError as e:
        raise OSError(f"cannot load Rudder's library {found!r} ({e}). Build it (`make` in the checkout: "
                      "build/lib/librudder.so, found from python/ there), install it (`cmake --install`), or set "
                      "RUDDER_LIBRARY to its path") from e
    p, c_char_p, c_size_t, c_int32 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32
    signatures = {
        "rudder_version": ([], c_char_p),
        "rudder_status_name": ([c_int32], c_char_p),
        "rudder_last_error": ([], c_char_p),
        "rudder_set_log": ([_LOG_FN, p, c_int32], c_int32),
        "rudder_keep_freed_memory_in_process": ([], c_int32),
        "rudder_set_compute_threads": ([c_int32], c_int32),
        "rudder_default_options": ([], _Options),
        "rudder_generator_create_limited": ([c_char_p, c_char_p, ctypes.POINTER(_Options), ctypes.POINTER(_Limits),
                                             ctypes.POINTER(p)], c_int32),
        "rudder_generator_free": ([p], None),
        "rudder_generator_last_error": ([p], c_char_p),
        "rudder_generator_keep_partial": ([p, c_int32], c_int32),
        "rudder_default_generate_options": ([], _GenerateOptions),
        "rudder_generate": ([p, ctypes.POINTER(_GenerateOptions), ctypes.POINTER(p)], c_int32),
        "rudder_generator_cancel": ([p], c_int32),
        "rudder_results_count": ([p], c_size_t),
        "rudder_results_text": ([p, c_size_t], c_char_p),
        "rudder_results_tokens": ([p, c_size_t, ctypes.POINTER(c_size_t)], ctypes.POINTER(ctypes.c_int64)),
        "rudder_results_verdict_count": ([p], c_size_t),
        "rudder_results_verdict": ([p, c_size_t, c_size_t], ctypes.POINTER(_VerdictInfo)),
        "rudder_results_free": ([p], None),
    }
    for name, (argtypes, restype) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
    return lib


_lib = _load()


def _text(raw: Optional[bytes]) -> str:
    return raw.decode("utf-8", errors="replace") if raw is not None else ""


def library_version() -> str:
    """librudder.so's version, e.g. "0.1.0"."""
    return _text(_lib.rudder_version())


def keep_freed_memory_in_process() -> bool:
    """Keeps freed tensor memory in the process (glibc): several times faster generation; see rudder.h."""
    return _lib.rudder_keep_freed_memory_in_process() == 1


def set_compute_threads(max_threads: int) -> None:
    """The most threads tensor computations use, process-wide; 0 (the default) means every core. Within it each
    run uses the cores other processes leave free, shared among generators running at once (rudder.h)."""
    if _lib.rudder_set_compute_threads(max_threads) != 0:
        raise ValueError(_text(_lib.rudder_last_error()))


_log_callback = None  # kept alive while the C library may call it


def set_log(callback: Optional[Callable[[int, str], None]], min_level: int = 2) -> None:
    """Sends Rudder's log messages at `min_level` and above (0 debug, 1 info, 2 warn, 3 error) to
    callback(level, message), or to stderr with None. The callback may run on any thread."""
    global _log_callback
    wrapped = _LOG_FN(lambda level, message, _: callback(level, _text(message))) if callback else _LOG_FN()
    status = _lib.rudder_set_log(wrapped, None, min_level)
    _log_callback = wrapped
    if status != OK:
        raise _error(status, _text(_lib.rudder_last_error()))


# ----- results ----------------------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """One controller's verdict on one sample: satisfied is True, False or None (the controller cannot tell)."""
    satisfied: Optional[bool]
    score: Optional[float]
    detail: Any = None  # the JSON the controller added, parsed


@dataclass
class Sample:
    index: int
    text: str
    tokens: List[int]
    controls: Dict[str, Verdict] = field(default_factory=dict)  # by controller label, in recipe order


@dataclass
class Progress:
    """After each reverse step: step counts per batch, the diffusion time t (1 = noise, 0 = clean), and with
    step_texts=True the current best guess of each sample of the batch."""
    batch: int
    batches: int
    step: int
    steps: int
    t: float
    samples_done: int
    samples_total: int
    texts: List[str]


def _verdict(info: _VerdictInfo) -> Verdict:
    detail = _text(info.detail)
    try:
        parsed = json.loads(detail) if detail else None
    except ValueError:
        parsed = detail
    return Verdict(satisfied=None if info.satisfied < 0 else info.satisfied == 1,
                   score=info.score if info.has_score else None, detail=parsed)


def _samples(res: ctypes.c_void_p) -> List[Sample]:
    out = []
    for i in range(_lib.rudder_results_count(res)):
        n = ctypes.c_size_t(0)
        ids = _lib.rudder_results_tokens(res, i, ctypes.byref(n))
        sample = Sample(index=i, text=_text(_lib.rudder_results_text(res, i)), tokens=ids[: n.value])
        for k in range(_lib.rudder_results_verdict_count(res)):
            info = _lib.rudder_results_verdict(res, i, k).contents
            sample.controls[_text(info.label)] = _verdict(info)
        out.append(sample)
    return out


# ----- generators -------------------------------------------------------------------------------------------------


def _bytes(value: Optional[Union[str, os.PathLike]]) -> Optional[bytes]:
    return os.fsencode(value) if value is not None else None


def _recipe_text_or_path(recipe) -> (Optional[bytes], Optional[bytes]):
    """A recipe argument as (JSON text, None) or (None, a file's path): a dict is written as JSON; a str or bytes
    whose first character past blanks is '{' or '[' is JSON text (the library then says what is wrong with it), any
    other str, bytes or os.PathLike a path. Anything else is refused here, naming its type."""
    if isinstance(recipe, dict):
        return json.dumps(recipe).encode(), None
    if isinstance(recipe, (str, bytes)):
        encoded = recipe.encode() if isinstance(recipe, str) else recipe
        if encoded.lstrip()[:1] in (b"{", b"["):
            return encoded, None
        if not encoded.strip():
            raise Error(ERR_INVALID_ARGUMENT, "recipe: empty; expected a file's path, JSON text or a dict")
        return None, os.fsencode(recipe)
    if isinstance(recipe, os.PathLike):
        return None, os.fsencode(recipe)
    raise Error(ERR_INVALID_ARGUMENT,
                f"recipe: expected a file's path, JSON text or a dict, got {type(recipe).__name__}")


def _paths(value: Optional[Union[str, List[str]]]) -> Optional[bytes]:
    if value is None or isinstance(value, (str, os.PathLike)):
        return _bytes(value)
    return _bytes(":".join(os.fspath(v) for v in value))


_INT64_MAX = 2**63 - 1


def _int64(name: str, value: int, least: int) -> int:
    """`value` as a C int64_t the library will see unchanged: ctypes would wrap 2**70 around silently."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Error(ERR_INVALID_ARGUMENT, f"{name} must be an integer, got {value!r}")
    if not least <= value <= _INT64_MAX:
        lowest = "-2**63" if least == -_INT64_MAX - 1 else str(least)
        raise Error(ERR_INVALID_ARGUMENT, f"{name} must be in [{lowest}, 2**63 - 1], got {value}")
    return value


class _InterruptWatch:
    """Ctrl-C while the main thread is inside rudder_generate. Python runs its own SIGINT handler only between
    bytecodes of the main thread, which is inside the C call until it returns; but the C-level handler also writes
    the signal's number to the wakeup file descriptor, which this thread reads to cancel the call at once
    (rudder_generator_cancel): a step blocked in a controller's process ends within a fraction of a second instead of
    at its time limit, or never. Other signals' bytes are passed on to the wakeup descriptor that was set before."""

    def __init__(self, handle: ctypes.c_void_p):
        self.signalled = False
        self._read, self._write = os.pipe()
        self._stop_read, self._stop_write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, args=(handle,), name="rudder-interrupt", daemon=True)
        self._thread.start()

    def _watch(self, handle: ctypes.c_void_p) -> None:
        while True:
            ready, _, _ = select.select([self._read, self._stop_read], [], [])
            if self._stop_read in ready:
                return
            numbers = os.read(self._read, 64)
            if signal.SIGINT in numbers:
                self.signalled = True
                _lib.rudder_generator_cancel(handle)
            others = bytes(n for n in numbers if n != signal.SIGINT)
            if others and self._previous >= 0:
                try:
                    os.write(self._previous, others)
                except OSError:
                    pass

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous)
        os.write(self._stop_write, b"\0")
        self._thread.join()
        for fd in (self._read, self._write, self._stop_read, self._stop_write):
            os.close(fd)


class Generator:
    """A recipe with its model and controllers loaded, ready to generate many times.

    recipe: a recipe file's path (str, bytes or os.PathLike), recipe JSON text (str or bytes starting with '{'), or a
    dict. model replaces the recipe's "model" (a bundled
    name or a directory); model_path and plugin_path (a folder or a list) are searched first for models and
    plugins by name; base_dir is where relative paths in recipe text or a dict resolve (a file: its folder).
    limits caps what a recipe may ask for: a dict with any of max_steps, max_samples, max_batch_size, max_length,
    max_memory_mb (a run's estimated peak memory; missing or 0: the library's default). Raises InvalidRecipe listing every problem with its JSON pointer.
    """

    _busy = False  # inside this generator's generate(): close() and generate() are refused

    def __init__(self, recipe: Union[str, os.PathLike, Dict[str, Any]], *, model: Optional[str] = None,
                 model_path=None, plugin_path=None, base_dir: Optional[str] = None,
                 limits: Optional[Dict[str, int]] = None):
        self._handle = ctypes.c_void_p()
        options = _lib.rudder_default_options()
        options.model, options.model_path = _bytes(model), _paths(model_path)
        options.plugin_path, options.base_dir = _paths(plugin_path), _bytes(base_dir)
        c_limits = _Limits(struct_size=ctypes.sizeof(_Limits))
        for key, value in (limits or {}).items():
            if key not in {name for name, _ in _Limits._fields_[1:]}:
                raise Error(ERR_INVALID_ARGUMENT, f"unknown limit '{key}' (max_steps, max_samples, max_batch_size, "
                                                  "max_length, max_memory_mb)")
            setattr(c_limits, key, _int64(f"limits['{key}']", value, -_INT64_MAX - 1))  # the library checks the sign
        text, path = _recipe_text_or_path(recipe)
        status = _lib.rudder_generator_create_limited(text, path, options, c_limits, ctypes.byref(self._handle))
        if status != OK:
            raise _error(status, _text(_lib.rudder_last_error()))
        _lib.rudder_generator_keep_partial(self._handle, 1)  # Cancelled and Interrupted carry the finished samples

    def generate(self, samples: Optional[int] = None, seed: Optional[int] = None,
                 on_step: Optional[Callable[[Progress], Any]] = None, step_texts: bool = False) -> List[Sample]:
        """Generates the recipe's samples (or `samples`, with the recipe's seed or `seed`).

        on_step(progress) runs after every reverse step; returning True cancels the run, which raises Cancelled
        (an exception raised in on_step cancels too and is re-raised here). step_texts=True fills progress.texts
        with each sample's current best guess (decoding costs, so it is off by default).

        Ctrl-C stops the run within a step, and within a fraction of a second where the step waits on a controller in a
        process of its own (whatever its time_limit), and raises Interrupted (a KeyboardInterrupt) whose `samples` are
        those finished before it; Cancelled carries them too. samples and seed must fit a C int64 (Error otherwise).
        """
        if self._handle is None or not self._handle.value:
            raise Error(ERR_INVALID_ARGUMENT, "generator is closed")
        if self._busy:
            raise Error(ERR_BUSY, "generate() called from a callback of this generator's own generate()")
        options = _lib.rudder_default_generate_options()
        if samples is not None:
            options.samples = _int64("samples", samples, 1)
        if seed is not None:
            options.override_seed, options.seed = 1, _int64("seed", seed, 0)
        raised: List[BaseException] = []
        interrupted: List[int] = []

        # The step callback always runs: it is where Python gets to handle Ctrl-C while the C call is under way.
        # The handler below only notes the signal, so no KeyboardInterrupt can surface inside the ctypes callback
        # (where it would be lost); the run is cancelled at the step's end and Interrupted raised after it.
        def step(progress_ptr, _user_data):
            try:
                if interrupted:
                    return 1
                if on_step is None:
                    return 0
                p = progress_ptr.contents
                texts = [_text(p.texts[i]) for i in range(p.n_texts)]
                stop = on_step(Progress(p.batch, p.batches, p.step, p.steps, p.t, p.samples_done, p.samples_total,
                                        texts))
                return 1 if stop is True else 0
            except BaseException as e:  # noqa: B902 - carried across the C call and re-raised below
                raised.append(e)
                return 1

        callback = _PROGRESS_FN(step)
        options.on_progress = callback
        options.progress_text = 1 if step_texts and on_step is not None else 0
        previous_handler = None
        watch = None
        if threading.current_thread() is threading.main_thread():
            previous_handler = signal.signal(signal.SIGINT, lambda signum, _frame: interrupted.append(signum))
            try:
                watch = _InterruptWatch(self._handle)
            except BaseException:
                signal.signal(signal.SIGINT, previous_handler)
                raise
        res = ctypes.c_void_p()
        self._busy = True
        try:
            status = _lib.rudder_generate(self._handle, options, ctypes.byref(res))
        finally:
            self._busy = False
            if watch is not None:
                watch.close()
                if watch.signalled:
                    interrupted.append(signal.SIGINT)
            if previous_handler is not None:
                signal.signal(signal.SIGINT, previous_handler)
        try:
            finished = _samples(res) if res.value else []
        finally:
            if res.value:
                _lib.rudder_results_free(res)
        if interrupted:
            raise Interrupted(finished)
        if raised:
            raise raised[0]
        if status == ERR_CANCELLED:
            raise Cancelled(status, _text(_lib.rudder_generator_last_error(self._handle)), finished)
        if status != OK:
            raise _error(status, _text(_lib.rudder_generator_last_error(self._handle)))
        return finished

    def close(self) -> None:
        """Frees the model and the controllers now rather than when the object is collected. Refused (Error with
        status ERR_BUSY) from a callback of this generator's own generate(): close it after generate() returns."""
        if self._busy:
            raise Error(ERR_BUSY, "close() called from a callback of this generator's own generate(); "
                                  "close it after generate() returns")
        if self._handle is not None and self._handle.value:
            _lib.rudder_generator_free(self._handle)
        self._handle = None

    def __enter__(self) -> "Generator":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # at interpreter exit the module's globals may already be gone
            pass
