"""Shader sources to SPIR-V: load SPIR-V files, compile GLSL, cache compiled results.

GLSL is compiled with Debian's ``glslangValidator``; sources that use ``GL_ARM_tensors`` need
glslang >= 15.4 and go to the ``glslc`` shipped inside ``ai-ml-sdk-scenario-runner`` instead.
Compiled SPIR-V is cached by the hash of the source, the options, the compiler and the content of
every file the compiler reported as a dependency, so an edited include recompiles.

What reaches the compiler is bounded: ``build_options`` only through the allow-list of
:mod:`vkcore.scenario.build_options`; for a scenario from a trace (``Scenario.confined``) include folders
only inside its folder and every ``#include`` checked first (:mod:`vkcore.shaders.includes`); and the
compiler runs under a time limit (:data:`COMPILER_TIMEOUT_S`, ``$VKCAP_COMPILER_TIMEOUT``).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import ScenarioError, UsageError
from ..outputs import write_atomic
from ..paths import cache_root, read_regular
from ..scenario.model import Scenario, Shader
from ..scenario.build_options import BuildOptionsError, parse_build_options
from .includes import SOURCE_LIMIT, check_includes
from .spirv_validate import without_duplicate_decorations

SPIRV_MAGIC = 0x07230203
GLSLANG_STAGES = {"compute": "comp", "vertex": "vert", "fragment": "frag"}  # a shader's stage -> glslang's -S
TENSOR_EXTENSION_RE = re.compile(rb"GL_ARM_tensors")
#: The GLSL version the reference runner compiles a source without ``#version`` as (its glslang's
#: default, measured: ARM's ``glslc`` writes ``OpSource GLSL 460`` for such a source).
DEFAULT_GLSL_VERSION = "460"
COMMENT_RE = re.compile(rb"/\*.*?\*/|//[^\n]*", re.DOTALL)
VERSION_DIRECTIVE_RE = re.compile(rb"^[ \t]*#[ \t]*version\b", re.MULTILINE)
#: Seconds a shader compiler may run before it is stopped and the shader refused; ``$VKCAP_COMPILER_TIMEOUT``
#: (seconds, more than 0) changes it.
COMPILER_TIMEOUT_S = 60.0
COMPILER_TIMEOUT_VARIABLE = "VKCAP_COMPILER_TIMEOUT"


def compiler_timeout() -> float:
    """:data:`COMPILER_TIMEOUT_S`, or ``$VKCAP_COMPILER_TIMEOUT`` when set (finite seconds, more than 0)."""
    text = os.environ.get(COMPILER_TIMEOUT_VARIABLE, "")
    if not text:
        return COMPILER_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < 1e6):
        raise UsageError(f"{COMPILER_TIMEOUT_VARIABLE}={text!r}: expected seconds, more than 0 (and finite)")
    return value


@dataclass(frozen=True)
class SpirvModule:
    """SPIR-V words (as bytes) ready for ``vkCreateShaderModule``, and where they came from."""

    uid: str
    code: bytes
    entry: str
    source: Path
    compiled_by: str | None = None  # compiler path for GLSL, None for SPIR-V input
    dependencies: tuple[Path, ...] = ()  # files the compiler read besides the source (includes)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.code).hexdigest()


def tensor_glslc() -> Path | None:
    """The tensor-capable ``glslc`` from the reference runner package, if installed."""
    # Located without importing the package: its __init__ loads a CPython 3.11-only extension.
    spec = importlib.util.find_spec("scenario_runner")
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / "binaries" / "bin" / "glslc"
    return p if p.is_file() else None


def is_spirv_binary(code: bytes) -> bool:
    """Whether ``code`` can be a SPIR-V binary: whole 32-bit words, a header's length, the magic."""
    return len(code) >= 20 and len(code) % 4 == 0 and int.from_bytes(code[:4], "little") == SPIRV_MAGIC


def _check_spirv(code: bytes, spec: Shader, path: Path) -> None:
    if not is_spirv_binary(code):
        raise ScenarioError(f"{path} is not a SPIR-V binary (bad magic or length)", file=None, place=f"{spec.place}.src")


def read_source(scenario: Scenario, spec: Shader, path: Path) -> bytes:
    """The bytes of shader file ``path``: a regular file of at most :data:`SOURCE_LIMIT` bytes (a FIFO or a
    device is refused without blocking), else :class:`ScenarioError` at ``spec``'s ``src``."""
    try:
        return read_regular(path, SOURCE_LIMIT)
    except OSError as exc:
        raise ScenarioError(f"cannot read {path}: {exc.strerror or exc}", file=scenario.path, place=f"{spec.place}.src") from None


def load_shader(scenario: Scenario, spec: Shader) -> SpirvModule:
    """Return the SPIR-V of ``spec``, compiling GLSL (cached). Errors are :class:`ScenarioError`."""
    path = scenario.src_path(spec.src)
    if spec.type == "SPIR-V":
        code = read_source(scenario, spec, path)
        _check_spirv(code, spec, path)
        return SpirvModule(spec.uid, code, spec.entry, path)
    return compile_glsl(scenario, spec, path)


def build_arguments(scenario: Scenario, spec: Shader) -> tuple[str, ...]:
    """``spec``'s build_options as the compiler's arguments (the allow-list's canonical spelling), else
    :class:`ScenarioError` at ``build_options``."""
    try:
        return parse_build_options(spec.build_options)
    except BuildOptionsError as exc:
        raise ScenarioError(str(exc), file=scenario.path, place=f"{spec.place}.build_options") from None


def _compiler_for(source: bytes) -> tuple[str, Path]:
    if TENSOR_EXTENSION_RE.search(source):
        glslc = tensor_glslc()
        if glslc is None:
            raise FileNotFoundError(
                "this shader uses GL_ARM_tensors, which needs the glslc of ai-ml-sdk-scenario-runner (not installed)"
            )
        return "glslc", glslc
    found = shutil.which("glslangValidator")
    if not found:
        raise FileNotFoundError("glslangValidator not found (apt-get install glslang-tools)")
    return "glslang", Path(found)


def declares_version(source: bytes) -> bool:
    """Whether GLSL ``source`` has a ``#version`` directive outside comments."""
    return VERSION_DIRECTIVE_RE.search(COMMENT_RE.sub(b"", source)) is not None


def _merged_include_dir(folders: list[Path], target: Path) -> Path:
    """One folder of symlinks to every file of ``folders`` (the first folder wins a name clash, as in
    include search order): ARM's ``glslc`` wrapper takes a single include folder."""
    target.mkdir()
    for folder in folders:
        for item in sorted(folder.rglob("*")):
            if item.is_file():
                link = target / item.relative_to(folder)
                if not link.exists():
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(item)
    return target


INCLUDE_RE = re.compile(rb'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


def scan_includes(source: Path, folders: list[Path], seen: set[Path] | None = None) -> list[Path]:
    """Files reached through ``#include`` from ``source`` (for compilers that write no depfile)."""
    seen = set() if seen is None else seen
    found: list[Path] = []
    try:
        text = read_regular(source, SOURCE_LIMIT)
    except (OSError, ValueError):
        return found
    for name in INCLUDE_RE.findall(text):
        rel = name.decode("utf8", "replace")
        for folder in [source.parent, *folders]:
            candidate = (folder / rel).resolve()
            if candidate.is_file():
                if candidate not in seen:
                    seen.add(candidate)
                    found.append(candidate)
                    found += scan_includes(candidate, folders, seen)
                break
    return found


def _command(kind: str, compiler: Path, spec: Shader, scenario: Scenario, src: Path, out: Path, dep: Path,
             source: bytes) -> list[str]:
    includes = [str(scenario.src_path(d)) for d in spec.include_dirs]
    options = list(build_arguments(scenario, spec))
    if kind == "glslc":
        # ARM's wrapper: its own flags, the options as one string (a leading space keeps its argument
        # parser from reading "-D..." as a flag), one include folder, no depfile.
        cmd = [str(compiler), "--stage", spec.stage, "--input", str(src), "--output", str(out)]
        if options:
            cmd += ["--build-opts", " " + shlex.join(options)]
        if includes:
            merged = _merged_include_dir([Path(d) for d in includes], dep.parent / "include")
            cmd += ["--include", str(merged)]
        return cmd
    cmd = [str(compiler), "-V", "-S", GLSLANG_STAGES[spec.stage], "--target-env", "vulkan1.3", "--quiet", "--depfile", str(dep)]
    if not declares_version(source):  # as the reference compiles it (ARM's glslc does the same itself)
        cmd += ["--glsl-version", DEFAULT_GLSL_VERSION]
    cmd += [f"-I{d}" for d in includes] + options
    if spec.entry != "main":
        cmd += ["-e", spec.entry, "--source-entrypoint", spec.entry]
    return cmd + ["-o", str(out), str(src)]


def _parse_depfile(text: str) -> list[str]:
    """Dependencies from a make-style depfile (``target: dep dep \\`` lines)."""
    body = text.split(":", 1)[1] if ":" in text else ""
    body = body.replace("\\\n", " ")
    return [p.replace("\\ ", " ") for p in re.split(r"(?<!\\)\s+", body.strip()) if p]


def _file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "missing"


def _depends_on_location(source: bytes, spec: Shader) -> bool:
    """Whether the SPIR-V compiled from ``source`` may depend on where its file lies: an ``#include``
    resolves relative to it, and debug information (``-g...``) records its path. A shader that does
    neither compiles to the same SPIR-V anywhere, so its cache entry is shared by every copy of it
    (a replay's ``--replace-shader`` copies the file into a new temporary folder every time)."""
    try:
        options = shlex.split(spec.build_options)
    except ValueError:
        return True
    return bool(spec.include_dirs) or INCLUDE_RE.search(source) is not None or any(o.startswith("-g") for o in options)


def compile_glsl(scenario: Scenario, spec: Shader, path: Path) -> SpirvModule:
    source = read_source(scenario, spec, path)
    build_arguments(scenario, spec)  # refused before anything runs
    folders = [scenario.src_path(d) for d in spec.include_dirs]
    check_includes(path, source, scenario.base_dir if scenario.confined else None, folders, file=scenario.path,
                   place=f"{spec.place}.src", shown=repr(spec.uid))
    try:
        kind, compiler = _compiler_for(source)
    except FileNotFoundError as exc:
        raise ScenarioError(str(exc), file=scenario.path, place=spec.place) from None
    located = _depends_on_location(source, spec)
    key_material = json.dumps(
        [hashlib.sha256(source).hexdigest(), str(path) if located else "", spec.build_options, list(spec.include_dirs),
         spec.entry, str(compiler), os.stat(compiler).st_mtime_ns, spec.stage],
    ).encode()
    key = hashlib.sha256(key_material).hexdigest()
    cache_dir = cache_root() / "spirv"
    cached = cache_dir / f"{key}.spv"
    manifest = cache_dir / f"{key}.deps.json"
    if not located and cached.is_file():
        try:  # the source's bytes are in the key and nothing else is read: no dependency to check
            return SpirvModule(spec.uid, without_duplicate_decorations(cached.read_bytes()), spec.entry, path, str(compiler), ())
        except OSError:
            pass
    if cached.is_file() and manifest.is_file():
        try:
            deps = json.loads(manifest.read_text())
            if all(_file_digest(p) == d for p, d in deps.items()):
                extra = tuple(Path(p) for p in sorted(deps) if Path(p) != path)
                return SpirvModule(spec.uid, without_duplicate_decorations(cached.read_bytes()), spec.entry, path, str(compiler), extra)
        except (OSError, ValueError):
            pass
    with tempfile.TemporaryDirectory(prefix="vkcap-glsl-") as tmp:
        out, dep = Path(tmp) / "out.spv", Path(tmp) / "out.d"
        cmd = _command(kind, compiler, spec, scenario, path, out, dep, source)
        timeout = compiler_timeout()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ScenarioError(f"shader compilation took longer than {timeout:g} s and was stopped "
                                f"({COMPILER_TIMEOUT_VARIABLE} sets the limit)", file=scenario.path,
                                place=f"{spec.place}.src") from None
        if proc.returncode != 0 or not out.is_file():
            message = _compiler_message(proc.stdout + proc.stderr, path)
            raise ScenarioError(f"shader compilation failed: {message}", file=scenario.path, place=f"{spec.place}.src")
        code = without_duplicate_decorations(out.read_bytes())  # see spirv_validate
        if dep.is_file():
            deps = _parse_depfile(dep.read_text(errors="surrogateescape"))
        else:
            deps = [str(p) for p in scan_includes(path, [scenario.src_path(d) for d in spec.include_dirs])]
    if scenario.confined:
        base = scenario.base_dir.resolve()
        outside = [p for p in deps if not Path(p).resolve().is_relative_to(base)]
        if outside:  # never expected after check_includes: a last guard, naming no host path
            raise ScenarioError(f"shader {spec.uid!r}: the compiler read a file outside the trace's folder",
                                file=scenario.path, place=f"{spec.place}.src")
    try:
        write_atomic(cached, [code])
        write_atomic(manifest, [json.dumps({p: _file_digest(p) for p in {str(path), *deps}}).encode()])
    except OSError:
        pass  # a cache we cannot write only costs time
    extra = tuple(sorted({Path(p) for p in deps} - {path}))
    return SpirvModule(spec.uid, code, spec.entry, path, str(compiler), extra)


def _compiler_message(output: str, path: Path) -> str:
    """The compiler's first error lines, with file and line, as one line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    noise = ("compilation terminated", "compilation errors", "spir-v is not generated", "error generated", "errors generated")
    errors = [ln for ln in lines if "error" in ln.lower() and not any(n in ln.lower() for n in noise)]
    chosen = errors[:2] or lines[:2] or ["the compiler gave no message"]
    text = "; ".join(chosen)
    return text.replace(str(path), path.name)
