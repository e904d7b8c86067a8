"""The energy-index command's entry point (click): it names every command and loads only the module of the one
that runs, so that a reading command (plan, estimate, sql) does not make the steps' and the other outputs'
options, nor read the source card for the build's default ITL deadline (docs/performance.md). The commands
live in cli_steps.py (one per step, refresh and history for all of them in order, verify), cli_readers.py
(the commands that read the published build) and cli_outputs.py (report, release, spark-sql, synth); what
they share (parameter types, options, how a handler runs and fails) in cli_common.py. Each command parses
its options, calls the library (the steps' workflow is pipeline/refresh.py) and prints, importing what it
uses when it runs."""

import signal
import sys
from collections.abc import Callable

import click

from pipeline import __version__
from pipeline.cli_common import STOPPED_BY
from pipeline.errors import PROG, PipelineError
from pipeline.progress import say


# One function per module, each a plain import: the edge stays where grep and tests/test_architecture.py's
# import graph see it (importlib and a module name in a string would hide it).
def _step_commands() -> dict[str, click.Command]:
    from pipeline import cli_steps

    return cli_steps.COMMANDS


def _reader_commands() -> dict[str, click.Command]:
    from pipeline import cli_readers

    return cli_readers.COMMANDS


def _output_commands() -> dict[str, click.Command]:
    from pipeline import cli_outputs

    return cli_outputs.COMMANDS


# Every command in the order --help lists them (the steps in the order they run, then the commands that read
# the published build, then those that write other outputs), each with the function that imports its module
# and returns that module's commands (its COMMANDS; tests/test_architecture.py checks that the two agree).
COMMAND_MODULES: dict[str, Callable[[], dict[str, click.Command]]] = {
    **dict.fromkeys(("fetch", "ingest", "build", "export", "refresh", "history", "verify"), _step_commands),
    **dict.fromkeys(("snapshots", "diff", "sql", "estimate", "plan", "compare"), _reader_commands),
    **dict.fromkeys(("report", "release", "spark-sql", "synth"), _output_commands),
}


class Commands(click.Group):
    """The commands of COMMAND_MODULES, each loaded when it is asked for (click's lazily loaded subcommands)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return COMMAND_MODULES[cmd_name]()[cmd_name] if cmd_name in COMMAND_MODULES else None

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.NoSuchCommand as error:  # click's "did you mean" reads the commands loaded so far: none
            raise click.NoSuchCommand(error.command_name, possibilities=COMMAND_MODULES, ctx=ctx) from None


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog="Steps run in order fetch -> ingest -> build -> export; 'refresh' runs all four (it is what "
             f"'make' runs), 'history' runs them over many snapshots, 'diff' compares two. Run '{PROG} COMMAND "
             "--help' for a command's options and examples.")
@click.version_option(__version__, "--version", prog_name=PROG, message="%(prog)s %(version)s")
def cli() -> None:
    """Turn the ML.ENERGY Leaderboard's published GPU-energy measurements into a validated DuckDB database
    and the energy index (Wh per million output tokens, per model and GPU)."""


def all_commands() -> dict[str, click.Command]:
    """Every command, each module loaded: for the generated docs (pipeline/docs.py) and the tests."""
    return {name: load()[name] for name, load in COMMAND_MODULES.items()}


def _stop(number: int, frame: object) -> None:
    """SIGINT and SIGTERM: the first raises KeyboardInterrupt (cleaned up, one line, exit 1); later ones
    are noted only, so that they cannot cut the clean-up or its line short with a traceback."""
    STOPPED_BY.append(signal.Signals(number).name)
    if len(STOPPED_BY) == 1:
        raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status (0, or 1 when a step failed). A usage error (2) and --help
    or --version (0) end by SystemExit, before any work, as click's standalone mode would."""
    try:
        STOPPED_BY.clear()  # a run's own
        if argv is None:
            # A stop from cron or a service manager is handled as Ctrl-C: cleaned up, one line, exit 1.
            # Unless the caller ignores it (nohup, a background job) or has its own handling.
            for number, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
                if signal.getsignal(number) is default:
                    signal.signal(number, _stop)
        try:
            arguments = sys.argv[1:] if argv is None else [str(arg) for arg in argv]
            with cli.make_context(PROG, arguments or ["--help"]) as context:
                return cli.invoke(context)
        except click.exceptions.Exit as done:
            raise SystemExit(done.exit_code) from None
        except click.UsageError as error:
            message = error.format_message()
            if error.ctx is not None:  # the reason, then where to read on: two sentences
                ended = message.rstrip(")").endswith((".", "?", "!"))
                message += f"{'' if ended else '.'} Try '{error.ctx.command_path} --help' for help."
            say(f"{PROG}: error: {message}")
            raise SystemExit(error.exit_code) from None
        except PipelineError as error:  # an argument naming what does not exist (existing_file, source)
            say(f"{PROG}: error: {error}")
            return 1
    except KeyboardInterrupt:  # before the command began (still importing, parsing): nothing to undo
        say(f"{PROG}: error: interrupted before it started; nothing was changed")
        return 1
