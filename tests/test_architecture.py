"""Where the code lives: pipeline/'s modules import one another without a cycle, the command line holds
no workflow (it parses, calls pipeline/refresh.py and the readers, and prints), and the refresh runs
without click."""

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

from conftest import NEWEST, snapshot_id

PACKAGE = Path(__file__).resolve().parent.parent / "pipeline"
# What the refresh is made of: the command line reaches these through pipeline/refresh.py only.
WORKFLOW_MODULES = {"archive", "fetch", "upstream", "ingest", "build", "export", "audit"}
# The command line: its entry point, what its commands share, and the three modules of commands.
CLI_MODULES = {"cli", "cli_common", "cli_steps", "cli_readers", "cli_outputs"}


def _tree(module: str) -> ast.Module:
    return ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))


def _modules() -> list[str]:
    return sorted(path.stem for path in PACKAGE.glob("*.py"))


def _imported_names(module: str) -> dict[str, set[str]]:
    """The pipeline modules `module` imports anywhere in it (at the top, inside a function, under
    TYPE_CHECKING), each with the names taken from it."""
    modules, found = set(_modules()), {}
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "pipeline" and len(parts) > 1:
                    found.setdefault(parts[1], set())
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] != "pipeline":
                continue
            if len(parts) > 1:
                found.setdefault(parts[1], set()).update(alias.name for alias in node.names)
            else:  # from pipeline import query: a module; from pipeline import settings too
                for alias in node.names:
                    if alias.name in modules:
                        found.setdefault(alias.name, set())
    found.pop(module, None)
    return {name: names for name, names in found.items() if name in modules}


def test_no_name_is_made_where_grep_cannot_find_it() -> None:
    """No module of pipeline/ or schemas/ defines names through a module __getattr__, writes into
    sys.modules (what an import finds) or globals(): each name is assigned or imported where it is written."""
    hidden = {"sys.modules", "globals()"}
    found = []
    for path in sorted([*PACKAGE.glob("*.py"), *(PACKAGE.parent / "schemas").glob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [f"{path.name}: module __getattr__" for node in tree.body
                  if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"]
        for node in ast.walk(tree):
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
            if any(isinstance(target, ast.Subscript) and ast.unparse(target.value) in hidden for target in targets):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and ast.unparse(node.func.value) in hidden and node.func.attr in {"update", "setdefault", "__setitem__"}):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, found


def test_each_command_is_named_once_beside_the_module_that_makes_it() -> None:
    """cli.COMMAND_MODULES names every command, in --help's order, with the module that makes it: each module's
    COMMANDS holds exactly the commands it defines, under the names cli.py gives them."""
    import click

    from pipeline import cli, cli_outputs, cli_readers, cli_steps

    modules = {cli._step_commands: cli_steps, cli._reader_commands: cli_readers, cli._output_commands: cli_outputs}
    assert set(cli.COMMAND_MODULES.values()) == modules.keys()
    for load, module in modules.items():
        named = [name for name, loader in cli.COMMAND_MODULES.items() if loader is load]
        assert list(load()) == named, module.__name__
        defined = {value for value in vars(module).values() if isinstance(value, click.Command)}
        assert defined == set(module.COMMANDS.values()), module.__name__
    assert list(cli.all_commands()) == list(cli.COMMAND_MODULES)


def _top_level_functions(module: str) -> set[str]:
    return {node.name for node in _tree(module).body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_the_import_graph_of_pipeline_has_no_cycle() -> None:
    graph = {module: set(_imported_names(module)) for module in _modules()}
    assert graph["cli"] and graph["refresh"], "the graph was not read"
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        raise AssertionError(f"an import cycle in pipeline/: {' -> '.join(error.args[1])}") from None
    assert sorted(order) == _modules()


def test_the_command_line_reaches_the_workflow_only_through_refresh() -> None:
    assert CLI_MODULES <= set(_modules())
    imported: dict[str, set[str]] = {}
    for module in CLI_MODULES:
        for name, names in _imported_names(module).items():
            imported.setdefault(name, set()).update(names)
    assert "refresh" in imported
    assert not WORKFLOW_MODULES & imported.keys(), f"the CLI imports {sorted(WORKFLOW_MODULES & imported.keys())}"
    # What the CLI takes of the publisher: OUT's lock, and the generation a single step (ingest, build, export) runs in.
    assert imported.get("publish", set()) <= {"exclusive_lock", "new_generation"}


def test_the_command_line_defines_no_function_another_module_defines() -> None:
    """Each step's function exists once: the CLI's command handlers are named <command>_command, and it
    defines nothing the refresh (or any other module) defines."""
    # main: the command line's entry point (pipeline/cli.py, called by pipeline/__main__.py)
    cli_functions = {node.name for module in CLI_MODULES for node in ast.walk(_tree(module))
                     if isinstance(node, ast.FunctionDef)} - {"main"}
    refresh_functions = _top_level_functions("refresh")
    assert {"refresh", "history", "update_published", "run_fetch", "run_ingest"} <= refresh_functions
    assert not cli_functions & refresh_functions
    for module in sorted(set(_modules()) - CLI_MODULES):
        public = {name for name in _top_level_functions(module) if not name.startswith("_")}
        assert not cli_functions & public, f"the CLI defines {sorted(cli_functions & public)}, as {module}.py does"


def test_a_command_loads_only_its_own_module_of_commands() -> None:
    """plan makes only the readers' commands: not the steps' options, nor the build's default ITL deadline,
    which the source card states (tomllib never imported); refresh makes the steps' and reads it."""
    script = (
        "import sys\n"
        "from pipeline.cli import main\n"
        "try:\n"
        "    main([*sys.argv[1:], '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(name for name in sys.modules if name.startswith('pipeline.cli_') or name == 'tomllib'))\n"
    )
    loaded = {command: subprocess.run([sys.executable, "-c", script, command], capture_output=True, text=True,
                                      timeout=120, check=True).stdout.splitlines()[-1]
              for command in ("plan", "refresh", "report")}
    assert loaded == {"plan": "['pipeline.cli_common', 'pipeline.cli_readers']",
                      "refresh": "['pipeline.cli_common', 'pipeline.cli_steps', 'tomllib']",
                      "report": "['pipeline.cli_common', 'pipeline.cli_outputs']"}


def _imports_click(module: str) -> bool:
    return any((isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "click" for alias in node.names))
               or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "click")
               for node in ast.walk(_tree(module)))


def test_nothing_the_refresh_imports_imports_click() -> None:
    reached, waiting = set(), ["refresh"]
    while waiting:
        if (module := waiting.pop()) not in reached:
            reached.add(module)
            waiting.extend(_imported_names(module))
    assert WORKFLOW_MODULES <= reached
    assert all(_imports_click(module) for module in CLI_MODULES)
    assert not [module for module in sorted(reached) if _imports_click(module)]


def test_a_refresh_runs_without_click(tmp_path: Path) -> None:
    """pipeline.refresh publishes a snapshot, then finds nothing to do, in a process where click cannot be
    imported."""
    script = (
        "import sys; sys.modules['click'] = None\n"
        "from pathlib import Path\n"
        "from pipeline.paths import Paths\n"
        "from pipeline.refresh import Options, refresh\n"
        "for _ in range(2):\n"
        f"    refresh(Paths(Path({str(tmp_path / 'out')!r})), Options(source={str(NEWEST)!r}))\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines, newest = run.stderr.splitlines(), snapshot_id(NEWEST)
    assert any(line.startswith(f"refresh: published {newest} (") for line in lines), run.stderr
    assert lines[-1] == f"refresh: {newest} is built and published with these parameters and this code; nothing to do"
    assert (tmp_path / "out" / "index").is_dir()
