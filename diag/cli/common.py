"""The command group and what its commands share: option bundles, opening the DB, one-line errors."""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import click

from diag import __version__, store
from diag.cli import checks, params
from diag.config import DEFAULT_DB, DEFAULT_TIMEOUT_S, SQLITE_INTEGER_MAX
from diag.contract import DTYPES, MODES, Config
from diag.errors import DiagError

if TYPE_CHECKING:  # imported where used: commands that read a DB (report, show) need neither
    from diag import envs
    from diag.store.typed import StoredRun

BACKENDS = ("inductor", "eager", "aot_eager", "cudagraphs")

MAX_BATCH = 4096

MAX_POSITIONS = 1 << 20  # any model's; each config is checked against its own model before running


# Every id and count a command takes fits SQLite's INTEGER: a larger one is a one-line usage error,
# never an OverflowError from the database.
SQLITE_MAX = SQLITE_INTEGER_MAX
RUN_ID = click.IntRange(1, SQLITE_MAX)


def count(minimum: int = 1) -> click.IntRange:
    """A count option's type: at least ``minimum``, at most what SQLite holds."""
    return click.IntRange(minimum, SQLITE_MAX)


def fail(message: str) -> click.ClickException:
    return click.ClickException(message.splitlines()[0] if message.strip() else "failed")


def db_option(fn: Callable) -> Callable:
    return click.option(
        "--db", "db_path", default=DEFAULT_DB, show_default=True, type=params.DB_FILE, help="SQLite database file."
    )(fn)


def json_option(fn: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(fn)


def verbose_option(fn: Callable) -> Callable:
    return click.option(
        "--verbose",
        is_flag=True,
        help="Each run's whole line: every figure unrounded, the whole reason a timing is not compared.",
    )(fn)


def timeout_option(help: str) -> Callable[[Callable], Callable]:
    return click.option(
        "--timeout", "timeout_s", type=click.FloatRange(min=1), default=DEFAULT_TIMEOUT_S, show_default=True, help=help
    )


# The run config's own defaults (``Config``'s fields) are the options' defaults: one definition.
DEFAULT = Config()


def config_options(fn: Callable) -> Callable:
    """The compile and workload options every command that runs a case shares."""
    options = [
        click.option(
            "--fullgraph/--no-fullgraph",
            default=None,
            help="Compile with fullgraph=True or False. Default: both, as two runs.",
        ),
        click.option(
            "--backend",
            type=click.Choice(BACKENDS),
            default=DEFAULT.backend,
            show_default=True,
            help="torch.compile backend.",
        ),
        click.option("--mode", type=click.Choice(MODES), default=None, help="torch.compile mode."),
        click.option(
            "--dynamic",
            type=click.Choice(["auto", "true", "false"]),
            default="auto",
            show_default=True,
            help="torch.compile dynamic= (auto passes None).",
        ),
        click.option("--batch-size", type=click.IntRange(1, MAX_BATCH), default=DEFAULT.batch_size, show_default=True),
        click.option(
            "--prompt-length",
            type=click.IntRange(1, MAX_POSITIONS),
            default=DEFAULT.prompt_length,
            show_default=True,
            help="Prompt tokens; with --new-tokens, within the model's positions.",
        ),
        click.option(
            "--new-tokens",
            type=click.IntRange(2, MAX_POSITIONS),
            default=DEFAULT.new_tokens,
            show_default=True,
            help="Tokens to generate (the prefill emits the first).",
        ),
        click.option("--dtype", type=click.Choice(sorted(DTYPES)), default=DEFAULT.dtype, show_default=True),
        click.option(
            "--device",
            default=DEFAULT.device,
            show_default=True,
            help="cpu, cuda or cuda:N (checked in each torch environment before any run).",
        ),
        click.option(
            "--model",
            "model_path",
            type=params.INPUT_FOLDER,
            default=None,
            help="Local transformers Llama checkpoint; default: a small random Llama.",
        ),
        click.option(
            "--seed", type=count(0), default=DEFAULT.seed, show_default=True, help="Seed for weights and prompt."
        ),
        click.option(
            "--repeats",
            type=click.IntRange(1, 100_000),
            default=DEFAULT.repeats,
            show_default=True,
            help="Timed generations per mode in the timing pass.",
        ),
        click.option(
            "--timing-seconds",
            type=click.FloatRange(0, 86_400),
            default=DEFAULT.timing_seconds,
            show_default=True,
            help="Timed generations per mode go on at least this long (after --repeats), so that "
            "the samples span the host's own changes of speed.",
        ),
        click.option(
            "--threads",
            type=click.IntRange(0, 4096),
            default=None,
            help="torch intra-op threads in the probes; 0 keeps torch's own choice. Default: 1 on "
            "CPU, where threads that wait on each other turn other load on the machine into 100x "
            "slower steps; torch's own choice on CUDA.",
        ),
        click.option(
            "--profile/--no-profile",
            default=DEFAULT.profile,
            show_default=True,
            help="diag run: after the timing pass, one eager and one compiled generation under torch.profiler: "
            "a gzipped Chrome trace in the run directory (open it in Perfetto) and the top ops "
            "by self time on the run page; then five compiled generations attributed by op group, and "
            "on CUDA each fused SDPA kernel torch refused with its reason; needs the timing pass. diag "
            "race: profiled rounds after the timed ones, each case's time per token by op group set "
            "against the first case's.",
        ),
        click.option(
            "--reuse-compiled/--no-reuse-compiled",
            default=DEFAULT.reuse_compiled,
            show_default=True,
            help="Let the diagnosis pass take the timing pass's compiled graphs from inductor's cache "
            "where the timing pass lowered every graph and torch logged no warning or exception "
            "meanwhile (dynamo still traces again with every log on). --no-reuse-compiled lowers "
            "every graph again, so that DEBUG records of a lowering that succeeded are in the log.",
        ),
        click.option(
            "--depyf/--no-depyf",
            default=DEFAULT.depyf,
            show_default=True,
            help="Where depyf is installed, dump dynamo's transformed bytecode, decompiled, into the run "
            "directory. Its hooks keep AOTAutograd from reusing the timing pass's graphs.",
        ),
        click.option(
            "--count-instructions/--no-count-instructions",
            default=DEFAULT.count_instructions,
            show_default=True,
            help="After the diagnosis, count the instructions the cold compile executes: with the CPU's "
            "counter where the host has one, else under valgrind's callgrind (Linux, valgrind "
            "installed; minutes a run). check and compare judge the count, which a busy machine "
            "does not change. Where neither works, the run says so in its capabilities.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def build_configs(
    fullgraph: Optional[bool],
    backend: str,
    mode: Optional[str],
    dynamic: str,
    batch_size: int,
    prompt_length: int,
    new_tokens: int,
    dtype: str,
    device: str,
    model_path: Optional[str],
    seed: int,
    repeats: int,
    timing_seconds: float,
    threads: Optional[int],
    profile: bool = False,
    reuse_compiled: bool = True,
    depyf: bool = False,
    count_instructions: bool = False,
) -> list[Config]:
    if not re.fullmatch(r"cpu|cuda(:\d{1,4})?", device):
        raise click.BadParameter(f"{device!r} is not cpu, cuda or cuda:N", param_hint="--device")
    fullgraphs = [True, False] if fullgraph is None else [fullgraph]
    return [
        Config(
            backend=backend,
            fullgraph=fg,
            dynamic={"auto": None, "true": True, "false": False}[dynamic],
            mode=mode,
            device=device,
            dtype=DTYPES[dtype],
            batch_size=batch_size,
            prompt_length=prompt_length,
            new_tokens=new_tokens,
            model=str(Path(model_path).resolve()) if model_path else None,
            seed=seed,
            repeats=repeats,
            timing_seconds=timing_seconds,
            threads=(1 if device == "cpu" else None) if threads is None else (threads or None),
            profile=profile,
            reuse_compiled=reuse_compiled,
            depyf=depyf,
            count_instructions=count_instructions,
        )
        for fg in fullgraphs
    ]


SWEEP_DEFAULTS = {"batch": "1,2,4,8", "length": "16,64,256"}


def sweep_configs(configs: list[Config], sweep: Optional[str], values: Optional[str]) -> list[Config]:
    """Each config repeated over the swept batch sizes or prompt lengths."""
    if sweep is None:
        if values is not None:
            raise click.BadParameter("needs --sweep batch|length", param_hint="--sweep-values")
        return configs
    try:
        numbers = [int(v) for v in (values or SWEEP_DEFAULTS[sweep]).split(",")]
    except ValueError:
        raise click.BadParameter(
            f"{values!r} is not a comma-separated list of integers", param_hint="--sweep-values"
        ) from None
    limit = MAX_BATCH if sweep == "batch" else MAX_POSITIONS
    if not numbers or min(numbers) < 1 or max(numbers) > limit:
        raise click.BadParameter(f"values must be integers from 1 to {limit}", param_hint="--sweep-values")
    if sweep == "batch":
        return [replace(config, batch_size=number) for config in configs for number in numbers]
    return [replace(config, prompt_length=number) for config in configs for number in numbers]


def configs_of(params: dict[str, Any]) -> list[Config]:
    """The configs a command's parsed options ask for: the config options (config_options), over
    the points of --sweep / --sweep-values."""
    chosen = {name: params[name] for name in inspect.signature(build_configs).parameters}
    return sweep_configs(build_configs(**chosen), params["sweep"], params["sweep_values"])


def open_store(db_path: str, create: bool = False, readonly: bool = False) -> Any:
    return store.open_db(db_path, create=create, readonly=readonly)


def read_store(db_path: str) -> Any:
    """An existing DB, opened for reading only: a read-only file or a shard is never written."""
    return open_store(db_path, readonly=True)


def run_preflight(check: Callable[..., None], *args: Any) -> None:

    check(*args)


# Where each top-level command is defined: a command's module (and what it imports) is imported
# only when that command runs, so ``diag report`` does not pay for the run, bisect and backfill code.
COMMAND_MODULES = {
    "backfill": "backfilling",
    "bisect": "bisecting",
    "cases": "reading",
    "changes": "changing",
    "check": "gating",
    "compare": "history",
    "env": "history",
    "env-diff": "history",
    "expect": "gating",
    "export": "reading",
    "file-upstream": "reading",
    "merge": "history",
    "plan": "sharding",
    "prune": "history",
    "race": "racing",
    "repro": "reading",
    "report": "reading",
    "run": "running",
    "runs": "reading",
    "show": "reading",
    "statuses": "reading",
}


class LazyGroup(click.Group):
    """A group whose commands' modules are imported on first use (``COMMAND_MODULES``); reading
    ``commands`` imports them all, as help, the reference and the tests see every command."""

    command_class = checks.CheckedCommand  # every command's outputs checked against its inputs first
    group_class = checks.CheckedGroup

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loaded = False
        super().__init__(*args, **kwargs)

    @property  # type: ignore[override]
    def commands(self) -> dict[str, click.Command]:
        if not self._loaded:
            self._loaded = True
            for module in sorted(set(COMMAND_MODULES.values())):
                importlib.import_module(f"diag.cli.{module}")
        return self._own

    @commands.setter
    def commands(self, value: dict[str, click.Command]) -> None:
        self._own = dict(value)

    def add_command(self, cmd: click.Command, name: Optional[str] = None) -> None:
        self._own[name or cmd.name] = cmd  # type: ignore[index]

    def get_command(self, ctx: Optional[click.Context], cmd_name: str) -> Optional[click.Command]:
        if cmd_name not in self._own and cmd_name in COMMAND_MODULES:
            importlib.import_module(f"diag.cli.{COMMAND_MODULES[cmd_name]}")
        return self._own.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self._own) | set(COMMAND_MODULES))

    def invoke(self, ctx: click.Context) -> Any:
        """The one error path: what a user can cause, raised anywhere in a command (a DiagError, or an
        OSError of the filesystem), is one line and exit status 1; commands never wrap them."""
        try:
            return super().invoke(ctx)
        except DiagError as exc:
            raise fail(str(exc)) from exc
        except BrokenPipeError:  # the reader went away (diag runs | head): nothing left to say it to
            raise
        except OSError as exc:
            where = " -> ".join(str(name) for name in (exc.filename, exc.filename2) if name is not None)
            said = exc.strerror or str(exc) or type(exc).__name__
            raise fail(f"{where}: {said}" if where else said) from exc


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="diag")
def cli() -> None:
    """Compile diagnostics for torch.compile'd LLM decode steps.

    Runs generation-step variants under torch.compile, records graph breaks,
    recompiles, swallowed errors and timings per torch build in SQLite.
    """


def env_options(fn: Callable) -> Callable:
    """How provisioned torch environments are built (shared by run and env add)."""
    options = [
        click.option(
            "--with",
            "extras",
            multiple=True,
            metavar="REQUIREMENT",
            help="Extra requirement for provisioned environments, e.g. transformers==4.38.2. Repeatable.",
        ),
        click.option(
            "--index-url",
            default=None,
            help="Index for torch itself (default for nightly specs: the PyTorch nightly index).",
        ),
        click.option(
            "--extra-index-url",
            "extra_index_urls",
            multiple=True,
            metavar="URL",
            help="Another index for releases and dependencies, beside the default one (for example "
            "PyTorch's CPU index beside a nightly). Repeatable.",
        ),
        click.option(
            "--variant", default="cpu", show_default=True, help="Nightly index variant: cpu, cu121, cu124, ..."
        ),
        click.option("--installer", type=click.Choice(["pip", "uv"]), default="pip", show_default=True),
        click.option(
            "--python",
            "python",
            default=None,
            metavar="VERSION|PATH",
            help="Interpreter for provisioned environments: a version (3.10), found on PATH, through "
            "pyenv or uv, or a path. Default: diag's own. torch 2.0 needs 3.10 or older.",
        ),
        click.option(
            "--find-links",
            "find_links",
            multiple=True,
            metavar="DIR",
            type=params.INPUT_FOLDER,
            help="A folder of torch wheels to look in before the index (also $DIAG_HOME/wheels). Repeatable.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["env_options"] = pop_env_options(kwargs)
        return fn(*args, **kwargs)

    return wrapper


def pop_env_options(params: dict[str, Any]) -> envs.Options:
    """The environment options of a command's parsed parameters, taken out of them as one value."""
    from diag import envs

    return envs.Options(
        extras=tuple(params.pop("extras")),
        index_url=params.pop("index_url"),
        extra_index_urls=tuple(params.pop("extra_index_urls")),
        variant=params.pop("variant"),
        installer=params.pop("installer"),
        python=params.pop("python"),
        find_links=tuple(params.pop("find_links")),
    )


def progress(message: str) -> None:
    click.echo(message, err=True)


def public_run(run: StoredRun) -> dict[str, Any]:
    """A run as JSON output: raw timing samples stay in ``diag show --json``."""
    return {k: v for k, v in run.items() if k not in ("timings", "traceback", "stderr_tail")}
