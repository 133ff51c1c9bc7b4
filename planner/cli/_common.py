"""What every ``planner`` command shares: its help layout, exit codes, the user-error
type, loading a fleet file into a request, and printing a planning error."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import planner
from planner.errors import CodedError, PlanError
from planner.fleet import FleetDocument, ModelChoice, load_fleet
from planner.fleet.document import OWN_BYTES
from planner.limits import MAX_BYTES, MAX_CONTEXT
from planner.models import ModelError, ModelSpec, list_presets
from planner.models.gpus import GpuModel, catalog_kind, listed_kinds
from planner.planning.memory_rule import MEMORY_MODELS
from planner.reports.tables import terminal_safe
from planner.units import UnitError, parse_bytes, parse_context

EXIT_OK = 0
EXIT_NO_TOPOLOGY = 1
EXIT_BAD_INPUT = 2

FORMATTER = argparse.RawDescriptionHelpFormatter


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str,
                run: Callable[[argparse.Namespace], int], *, help: str, description: str,
                examples: Sequence[str], exit_codes: str | None = None,
                ) -> argparse.ArgumentParser:
    """The subcommand ``name`` handled by ``run``, its help ending in the examples and
    the exit codes, as every command's does."""
    epilog = "examples:\n" + "\n".join(f"  {example}" for example in examples)
    if exit_codes is not None:
        epilog += f"\n\nexit codes: {exit_codes}"
    parser = commands.add_parser(name, help=help, formatter_class=FORMATTER,
                                 description=description, epilog=epilog)
    parser.set_defaults(handler=run)
    return parser


def add_fleet_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("fleet", metavar="FLEET", help="fleet file (.toml or .json)")


def add_memory_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--memory-model", choices=MEMORY_MODELS, default="design",
        help="memory rule to plan with: design (default; weights + ceil(kv/L) x context "
             "per layer) or llamacpp (what llama.cpp allocates per device, read from the "
             "fleet's GGUF file; a quantized V cache needs flash attention)")


def add_catalog_argument(parser: argparse.ArgumentParser, use: str) -> None:
    """``--catalog FILE``, read by :func:`planner.models.gpu_catalog_with` in every
    command: its kinds are added to the shipped ones, for ``use``."""
    parser.add_argument(
        "--catalog", metavar="FILE",
        help=f"GPU kinds added to the shipped catalog, in data/gpus.toml's format (a kind "
             f"with a shipped id replaces that one), {use}")


def add_calibration_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--calibration", metavar="FILE",
        help="the speed estimate's calibration: a file planner calibrate wrote from your "
             "own llama-bench runs (default: the shipped one, fitted on published runs)")


class UserError(CodedError):
    """A problem with the command line the user can fix, printed as ``planner: <message>``."""

    codes = ("CommandLineError",)

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__("CommandLineError", message)
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


MODEL_SOURCES = "a preset id, a GGUF file (.gguf) or a fleet file (.toml, .json)"


def token_count(value: str, option: str, minimum: int = 1) -> int:
    """A count of tokens as the user writes it on any command ("32768", "32,768" or
    "32k"), from ``minimum`` to :data:`~planner.limits.MAX_CONTEXT`; else a
    :class:`UserError` that names ``option``."""
    try:
        tokens = parse_context(value)
    except UnitError as error:
        raise UserError(f"{option}: {error.message}") from None
    if not minimum <= tokens <= MAX_CONTEXT:
        raise UserError(f"{option}: must be from {minimum} to {MAX_CONTEXT:,} tokens "
                        f"(got {tokens:,})")
    return tokens


def option_kind(catalog: Sequence[GpuModel], name: str, option: str = "--gpu") -> GpuModel:
    """The catalog kind ``option`` names (an id or name, any case, as
    :func:`~planner.models.gpus.catalog_kind` finds it); one not in the catalog is refused
    by the option, with the kinds known and how to add one."""
    try:
        return catalog_kind(catalog, name)
    except ModelError:
        raise UserError(f"{option}: {name!r} is not in the catalog; known kinds: "
                        f"{listed_kinds(catalog)}; describe a kind of your own in a catalog "
                        "file (data/gpus.toml's format) and add it with --catalog FILE"
                        ) from None


def option_error(error: CodedError, options: Mapping[str, str]) -> UserError | None:
    """``error`` said as the option that gave its field (``options``: field to option),
    the field's own name dropped from the message; ``None`` where no option gave it (a
    file's value keeps the file's name)."""
    field = error.details.get("field")
    option = options.get(str(field))
    if option is None:
        return None
    return UserError(f"{option}: {error.message.removeprefix(f'{field}: ')}")


def file_size_option(value: str, source: str) -> int:
    """``--file-size``: the bytes of the model file run, where a preset's weights were
    stored otherwise (``source``, where the model's figures come from: ``"preset"``; a
    GGUF file's and typed numbers' state their bytes, and are refused)."""
    if source in OWN_BYTES:
        raise UserError(f"--file-size: {OWN_BYTES[source]}; --file-size gives a preset "
                        "the size of the file run")
    try:
        size = parse_bytes(value)
    except UnitError as error:
        raise UserError(f"--file-size: {error.message}") from None
    if not 1 <= size <= MAX_BYTES:
        raise UserError(f"--file-size: must be from 1 byte to {MAX_BYTES:,} (got {size:,})")
    return size


def add_file_size_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--file-size", metavar="SIZE",
                        help="the model file's size (e.g. 11.27GiB) where a preset's "
                             "weights were stored otherwise: its parts keep their shares "
                             "(a fleet file's model.file_bytes, in its place)")


def spec_in_file(spec: ModelSpec, value: str | None, source: str) -> ModelSpec:
    """``spec`` stored in ``--file-size`` bytes (``value``, where given;
    :func:`file_size_option`): :meth:`~planner.models.ModelSpec.stored_in`, a size that
    cannot hold the model said by the option."""
    if value is None:
        return spec
    size = file_size_option(value, source)
    with options_named({"file_bytes": "--file-size"}):
        return spec.stored_in(size)


def fleet_model_in_file(model: ModelChoice, value: str | None, base_dir: Path | None
                        ) -> tuple[ModelChoice, ModelSpec | None]:
    """A fleet file's model with ``--file-size`` (``value``, where given) as its
    ``file_bytes``, and its spec (``None`` for numbers): a size that cannot hold the
    preset said by the option, the file's own by the file's field."""
    if value is None:
        return model, model.spec(base_dir)
    model = replace(model, file_bytes=file_size_option(value, model.kind))
    with options_named({"model.file_bytes": "--file-size"}):
        return model, model.spec(base_dir)


@contextmanager
def options_named(options: Mapping[str, str]) -> Iterator[None]:
    """Within it, an error of a field an option gave (``options``: field to option) is
    said as that option (:func:`option_error`); any other error passes unchanged."""
    try:
        yield
    except CodedError as error:
        named = option_error(error, options)
        if named is None:
            raise
        raise named from None


def model_source(source: str, option: str = "MODEL", sources: str = MODEL_SOURCES) -> str:
    """What a model argument (``option``, taking ``sources``) names, by its suffix:
    ``"fleet"``, ``"gguf"`` or ``"preset"`` (a preset's id whatever the folder holds). A
    path that is none of them (a folder, a file without either suffix, a path that does
    not exist) is refused by what it is, not looked up as a preset."""
    suffix = Path(source).suffix.lower()
    if suffix in (".toml", ".json"):
        return "fleet"
    if suffix == ".gguf":
        return "gguf"
    if source in list_presets():
        return "preset"
    path = Path(source)
    if path.is_dir():
        raise UserError(f"{option}: {source!r} is a folder; {option} is {sources}")
    if path.exists():
        raise UserError(f"{option}: {source!r} is a file without a .gguf, .toml or .json "
                        f"suffix; {option} is {sources}")
    if os.sep in source or (os.altsep is not None and os.altsep in source):
        raise UserError(f"{option}: {source!r} does not exist; {option} is {sources}")
    return "preset"


def exit_code(error: CodedError) -> int:
    """1 when no topology exists, the :class:`UserError`'s own code, else 2."""
    if isinstance(error, UserError):
        return error.exit_code
    return EXIT_NO_TOPOLOGY if error.code == "NoValidTopology" else EXIT_BAD_INPUT


def load_request(path: str, memory_model: str = "design", *, gguf: str | None = None,
                 ) -> tuple[FleetDocument, planner.PlanningInput]:
    """The fleet file at ``path`` and the planning request it describes, with the
    memory rule ``memory_model``; ``gguf``, when given, is the model's file instead of
    the one the fleet names."""
    document = load_fleet(path)
    if gguf is not None:
        model = replace(document.model, preset=None, numbers=None,
                        gguf=os.path.abspath(gguf))
        document = replace(document, model=model)
    try:
        return document, document.to_request(memory_model)
    except planner.InvalidInput as error:
        raise UserError(f"{path}: {error.message}") from None


def say_error(source: str, error: PlanError) -> None:
    print(terminal_safe(f"planner: {source}: {error.code}: {error.message}"), file=sys.stderr)


def plan_or_exit_code(source: str, request: planner.PlanningInput,
                      as_json: bool) -> planner.Plan | int:
    """The plan for ``request``, or, when there is none, the exit code after the error was
    said on stderr (and printed as ``{"error": ...}`` on stdout with ``as_json``)."""
    result = result_or_exit_code(source, request, as_json)
    return result if isinstance(result, int) else result.plan_or_raise()


def result_or_exit_code(source: str, request: planner.PlanningInput,
                        as_json: bool) -> planner.PlanningResult | int:
    """``request`` planned once (:func:`planner.plan_request`) with a plan, or, when there
    is none, the exit code after the error was said as :func:`plan_or_exit_code` says it."""
    try:
        result = planner.plan_request(request)
        result.plan_or_raise()
    except PlanError as error:
        if as_json:
            print(json.dumps({"error": error.to_dict()}, indent=2))
        say_error(source, error)
        return exit_code(error)
    return result
