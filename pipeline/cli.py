"""The energy-index command (click): one subcommand per step, and refresh for all of them in order. It
parses the options, calls the library (the steps' workflow is pipeline/refresh.py) and prints. The
commands live in three modules (cli_steps.py, cli_readers.py, cli_outputs.py) beside what they share
(cli_common.py); this one names every command and loads only the module of the one that runs, so that
`plan` does not make the other commands' hundred options, nor read the source card for the build's
default ITL deadline (docs/performance.md). Each command imports what it uses when it runs."""

import signal
import sys
from collections.abc import Callable

import click

from pipeline import __version__
from pipeline.cli_common import STOPPED_BY
from pipeline.errors import PROG, PipelineError
from pipeline.progress import say


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
# the published build, then those that write other outputs), each with the function that loads its module.
COMMANDS: dict[str, Callable[[], dict[str, click.Command]]] = {
    **dict.fromkeys(("fetch", "ingest", "build", "export", "refresh", "history", "verify"), _step_commands),
    **dict.fromkeys(("snapshots", "diff", "sql", "estimate", "plan", "compare"), _reader_commands),
    **dict.fromkeys(("report", "release", "spark-sql", "synth"), _output_commands),
}


class Commands(click.Group):
    """The commands of COMMANDS, each loaded when it is asked for (click's lazily loaded subcommands)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return COMMANDS[cmd_name]()[cmd_name] if cmd_name in COMMANDS else None

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.NoSuchCommand as error:  # click's "did you mean" reads the commands loaded so far: none
            raise click.NoSuchCommand(error.command_name, possibilities=COMMANDS, ctx=ctx) from None


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
    return {name: load()[name] for name, load in COMMANDS.items()}


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
            where = f" Try '{error.ctx.command_path} --help' for help." if error.ctx is not None else ""
            say(f"{PROG}: error: {error.format_message()}{where}")
            raise SystemExit(error.exit_code) from None
        except PipelineError as error:  # an argument naming what does not exist (existing_file, source)
            say(f"{PROG}: error: {error}")
            return 1
    except KeyboardInterrupt:  # before the command began (still importing, parsing): nothing to undo
        say(f"{PROG}: error: interrupted before it started; nothing was changed")
        return 1
