"""The `gpuprof` command: a thin click layer that parses, calls one library function, and maps
errors to exit codes (0 ok, 1 failure, 2 usage, 3 could not measure; `check`: 4 undecided).
One module per command group: `measure` (sweep, run), `read` (show, report, consolidate),
`export`, `check`, `gate` (baseline, compare, trend), `predict`, `env`; `options` holds the
options they share. Heavy modules (torch, plotly, pandas) are imported inside the commands
that need them.

May import every other stage; nothing imports it (the console script and `python -m gpuprof`
start here)."""

from __future__ import annotations

import sys
import traceback

import click

from gpuprof._version import __version__
from gpuprof.cli import check, env, export, gate, importing, measure, predict, read, trace
from gpuprof.errors import GpuprofError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuprof")  # the code that runs, installed or not
@click.option("--debug", is_flag=True, help="show tracebacks on errors (any command)")
def cli(debug: bool) -> None:
    """GPU cluster profiler: collectives, links, ceilings and training micro-benchmarks."""


for _command in (
    measure.sweep,
    measure.run,
    read.show,
    read.report,
    read.consolidate,
    read.runs,
    trace.trace,
    env.env_command,
    check.check,
    *gate.GATE_COMMANDS,
    *predict.PREDICT_COMMANDS,
    *export.EXPORT_COMMANDS,
    *importing.IMPORT_COMMANDS,
):
    cli.add_command(_command)


# old spellings, accepted for one release with a one-line note: (commands, old, new). `-o` names
# an output file everywhere else (docs/development.md, "Naming")
RENAMED = (
    (("sweep", "run"), "-o", "--op"),
    (("predict",), "--network-gbps", "--nic-gbps"),
)


def renamed(args: list[str]) -> list[str]:
    """The arguments with old spellings replaced, each replacement said once on stderr."""
    command = next((a for a in args if not a.startswith("-")), None)
    out = list(args)
    for commands, old, new in RENAMED:
        if command not in commands:
            continue
        for i, arg in enumerate(out):
            if arg == old or arg.startswith(old + "="):
                out[i] = new + arg[len(old) :]
                click.echo(f"gpuprof: note: {old} is now {new} (the old spelling goes in the "
                           "next release)", err=True)  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    """Console entry point: one-line errors; exit 0 ok, 1 failure, 2 usage, 3 not measured
    (`check`: 4 undecided).
    `--debug` (anywhere on the line) adds the traceback and keeps the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = renamed([a for a in args if a != "--debug"]) or ["--help"]  # bare: the help, exit 0
    try:
        result = cli.main(
            args=args, prog_name="gpuprof", standalone_mode=False, obj={"argv": ["gpuprof", *args]}
        )
    except GpuprofError as exc:
        return _fail(exc.one_line(), exc.exit_code, debug)
    except click.exceptions.Abort:
        click.echo("gpuprof: interrupted", err=True)
        return 130
    except click.ClickException as exc:
        code = 2 if isinstance(exc, click.UsageError) else exc.exit_code
        message = exc.format_message()
        ctx = getattr(exc, "ctx", None)
        if isinstance(exc, click.UsageError) and ctx is not None:  # the next step
            message = f"{message.rstrip('.')} (see {ctx.command_path} --help)"
        return _fail(message, code, debug)
    except Exception as exc:  # a bug: still one line, the traceback with --debug
        detail = f"internal error: {type(exc).__name__}: {exc}"
        hint = "" if debug else " (rerun with --debug for the traceback)"
        return _fail(detail + hint, 1, debug)
    return result if isinstance(result, int) else 0


def _fail(message: str, code: int, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    click.echo(f"gpuprof: error: {message}", err=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
