"""The nightly workflow stays thin: every step that does work is a diag command the tests exercise."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
import yaml
from conftest import REPO, diag_here, installed_tool

from diag.cli import sharding
from diag.run import matrix
from diag.verdicts import regress

TESTED = {"run", "merge", "report", "env", "prune", "check", "plan", "race"}
MATRIX = REPO / ".github" / "nightly-matrix.toml"


def _workflow() -> dict:
    return yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())


def _parts() -> list[list[str]]:
    """The nightly matrix's parts, each the words of one `diag run`."""
    return [shlex.split(table["run"]) for table in tomllib.loads(MATRIX.read_text())["part"]]


def _values(words: list[str], option: str) -> list[str]:
    return [words[i + 1] for i, word in enumerate(words[:-1]) if word == option]


# The shell's one piece of work ahead of a diag command: CASES (dispatch input) split into --case words.
SPLIT_CASES = 'read -ra cases <<< "$CASES" && '


def _command(run: str) -> str:
    """A run line's diag command, the splitting of CASES ahead of it left out."""
    return run[len(SPLIT_CASES) :] if run.startswith(SPLIT_CASES) else run


def _timed_runs(workflow: dict) -> dict[str, list[str]]:
    """The words of each timed `diag run`: the matrix's timed parts, and the workflow's own (extra, cuda)."""
    timed = {f"part {i}": words for i, words in enumerate(_parts()) if "--no-timing" not in words}
    timed.update(
        (name, _command(step["run"]).split())
        for name, job in workflow["jobs"].items()
        for step in job["steps"]
        if str(step.get("run", "")).startswith(SPLIT_CASES + "diag run")
    )
    return timed


def test_every_run_step_is_an_install_or_a_tested_diag_command():
    workflow = _workflow()
    commands = [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]
    assert commands
    for command in commands:
        if command.startswith("python -m pip install") or command.startswith("sudo apt-get update -qq && sudo apt-get"):
            continue
        words = _command(command).split()
        assert words[0] == "diag" and words[1] in TESTED, command
    specs = {spec for words in _parts() for spec in _values(words, "--torch")}
    assert {"nightly", "2.15.0"} <= specs and len(specs) >= 4
    assert set(workflow["jobs"]["publish"]["needs"]) == {"shard", "cuda", "extra", "race", "instructions"}


def test_the_shard_jobs_run_the_plans_shares():
    """plan -> a matrix of shard jobs (fromJSON of the plan's output) -> each runs its share of plan.json."""
    jobs = _workflow()["jobs"]
    plan = next(s for s in jobs["plan"]["steps"] if str(s.get("run", "")).startswith("diag plan"))
    words = plan["run"].split()
    assert _values(words, "--matrix") == [".github/nightly-matrix.toml"] and _values(words, "--out") == ["plan.json"]
    assert _values(words, "--history") == ["site/history.db"] and _values(words, "--github-output") == ["matrix"]
    assert jobs["plan"]["outputs"]["matrix"] == "${{ steps.%s.outputs.matrix }}" % plan["id"]
    assert jobs["shard"]["needs"] == "plan"
    assert jobs["shard"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    (run,) = [s["run"] for s in jobs["shard"]["steps"] if str(s.get("run", "")).startswith("diag run")]
    assert run == 'diag run --plan plan.json --shard "$SHARD" --db shard.db'
    assert jobs["shard"]["env"]["SHARD"] == "${{ matrix.shard }}"
    # the transformers that plans hf:all is the one every part pins
    (pin,) = {pin for words in _parts() for pin in _values(words, "--with")}
    installs = [
        s["run"] for name in ("plan", "shard") for s in jobs[name]["steps"] if "pip install" in s.get("run", "")
    ]
    assert len(installs) == 2 and all(install.split()[-1] == pin for install in installs)


def test_every_torch_spec_runs_every_transformers_architecture():
    timed_specs = {spec for words in _parts() if "--no-timing" not in words for spec in _values(words, "--torch")}
    architectures = [words for words in _parts() if "hf:all" in words]
    assert {spec for words in architectures for spec in _values(words, "--torch")} >= timed_specs - {"2.13.0"}
    for words in architectures:
        assert "--no-fullgraph" not in words and "--fullgraph" not in words and "--no-timing" in words


def test_every_timed_leg_runs_enough_repeats_for_a_latency_verdict():
    """A row's runs of a night are what ``diag check`` pools: fewer than the rank test needs at the
    default alpha and every slowdown of that row would only ever be inconclusive."""
    timed = _timed_runs(_workflow())
    assert {"extra", "cuda"} <= set(timed) and len(timed) >= 4
    needed = regress.runs_needed(regress.Thresholds().alpha)
    for words in timed.values():
        assert int(words[words.index("--repeat") + 1]) >= needed, " ".join(words)


def test_the_benchmark_times_what_a_nightly_timed_part_runs():
    """Fidelity and the leg's timing are measured at the settings the timed parts really use."""
    spec = importlib.util.spec_from_file_location("bench_run", REPO / "bench" / "run.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for name, timed in _timed_runs(_workflow()).items():
        if name.startswith("part"):
            for option in ("--threads", "--repeat", "--timing-seconds"):
                assert bench.leg_option(option) == timed[timed.index(option) + 1], option


def test_the_nightly_is_timed_beside_its_twin_and_the_gate_sets_slowdowns_against_it():
    """The stable release the gate's --stable names is in the nightly's own timed part: each timed unit
    holds every build of its part, so the twin is timed on the nightly's runner, as the nightly is."""
    parts = _parts()
    (nightly,) = [words for words in parts if "nightly" in _values(words, "--torch") and "--no-timing" not in words]
    check = next(
        s["run"] for s in _workflow()["jobs"]["publish"]["steps"] if str(s.get("run", "")).startswith("diag check")
    )
    twin = check.split()[check.split().index("--stable") + 1]
    assert _values(nightly, "--torch") == ["nightly", twin]
    assert sum(twin in _values(words, "--torch") for words in parts) == 1  # timed once a night
    part = sharding.parse_part(0, nightly, "test")
    matrix.resolve_cases([part], print)
    units = matrix.units([part], {})
    assert units and all(unit.specs == ("nightly", twin) for unit in units)


def test_every_shard_keeps_the_wheels_it_tested_in_the_actions_cache():
    workflow = _workflow()
    for name in ("shard", "cuda"):
        caches = [s for s in workflow["jobs"][name]["steps"] if str(s.get("uses", "")).startswith("actions/cache")]
        assert caches and caches[0]["with"]["path"] == "~/.cache/diag/wheels", name


def test_the_workflow_gates_and_publishes_without_losing_history():
    workflow = _workflow()
    jobs = workflow["jobs"]
    assert jobs["publish"]["permissions"] == {"contents": "write", "issues": "write"}
    assert workflow["concurrency"]["group"] and jobs["publish"]["if"] == "${{ !cancelled() }}"
    steps = jobs["publish"]["steps"]
    assert not any(step.get("continue-on-error") for step in steps)  # a failed checkout fails the publish
    commands = [step.get("run", "") for step in steps]
    order = [
        next(i for i, c in enumerate(commands) if c.startswith(f"diag {name}"))
        for name in ("merge", "prune", "report", "check")
    ]
    assert order == sorted(order)
    assert "--junit" in commands[order[-1]] and "--allow .github/diag-allow.txt" in commands[order[-1]]
    assert (REPO / ".github" / "diag-allow.txt").exists()
    pages = next(step for step in steps if str(step.get("uses", "")).startswith("peaceiris/actions-gh-pages"))
    assert pages["with"].get("force_orphan") is True and "keep_files" not in pages["with"]
    legs = (("shard", "shard-cpu-"), ("cuda", "shard-cuda-"), ("extra", "shard-extra-"), ("race", "shard-race-"))
    for name, artifact in legs:
        upload = next(s for s in jobs[name]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
        assert "shard.db*" in upload["with"]["path"] and "shard.runs/" in upload["with"]["path"]
        # the runs record the artifact they are uploaded in (DIAG_ARTIFACT), so the name must be that one
        assert upload["with"]["name"] == "${{ env.DIAG_ARTIFACT }}"
        assert upload["with"]["overwrite"] is True and "run_attempt" in jobs[name]["env"]["DIAG_ARTIFACT"]
        assert jobs[name]["env"]["DIAG_ARTIFACT"].startswith(artifact)
        assert upload["if"] == "${{ !cancelled() }}"
    merged = next(c for c in commands if c.startswith("diag merge")).split()
    assert "shards/*/shard.db" in merged  # every shard job's DB, by the artifact names' common pattern
    for words in _parts():
        assert _values(words, "--with") and all("transformers==" in pin for pin in _values(words, "--with"))
    assert "torch" in workflow[True]["workflow_dispatch"]["inputs"]  # YAML reads the key `on` as true
    assert "--alerts alerts.json" in commands[order[-1]] and jobs["publish"]["permissions"].get("issues") == "write"
    script = next(s for s in steps if str(s.get("uses", "")).startswith("actions/github-script"))
    # it runs on every night that checked, a regression or not, so that a cause not seen is said fixed
    assert "!cancelled()" in script["if"] and "alert.marker" in script["with"]["script"]
    assert "diag-cause:[0-9a-f]{16}" in script["with"]["script"] and "state: 'closed'" in script["with"]["script"]


WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
# Every `uses:` names its action by the full commit of a release, with that release in a comment.
PINNED = re.compile(r"^(?P<action>[\w.-]+/[\w.-]+)@(?P<sha>[0-9a-f]{40}) # (?P<version>v\d+\.\d+\.\d+)$")


def _lint(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """actionlint (its shellcheck rule on every run: line) or zizmor, the pinned builds the test extra
    installs, run as .ci/run runs them."""
    tool = installed_tool(args[0])
    assert tool, f"{args[0]} is not installed: pip install -e '.[test]' installs it"
    return subprocess.run([tool, *args[1:]], cwd=cwd, capture_output=True, text=True, timeout=120)


def _zizmor(path: Path, cwd: Path, *config: str) -> subprocess.CompletedProcess:
    return _lint("zizmor", "--offline", "--persona=auditor", "--format=plain", *config, str(path), cwd=cwd)


def _uses(workflow: dict) -> list[tuple[str, dict]]:
    return [(name, step) for name, job in workflow["jobs"].items() for step in job["steps"] if "uses" in step]


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed: .ci/run installs it")
def test_actionlint_and_zizmor_find_nothing_that_is_not_declared():
    """What .ci/run runs: actionlint (the GPU runner's label declared in .github/actionlint.yaml) and
    zizmor at its strictest persona (the self-hosted GPU leg declared in .github/zizmor.yml)."""
    linted = _lint("actionlint", "-shellcheck", shutil.which("shellcheck"), cwd=REPO)
    assert linted.returncode == 0 and linted.stdout == "", linted.stdout + linted.stderr
    audited = _zizmor(REPO / ".github", REPO, "--config", str(REPO / ".github" / "zizmor.yml"))
    assert audited.returncode == 0 and "No findings" in audited.stdout, audited.stdout + audited.stderr


def test_the_linters_find_what_they_are_run_to_find(tmp_path):
    """The same two linters on a workflow with each fault they guard against: a moving tag on a
    runtime GitHub removed, an input expanded into a shell line, a checkout that keeps its token."""
    path = tmp_path / ".github" / "workflows" / "faulty.yml"
    path.parent.mkdir(parents=True)
    faulty = {
        "name": "faulty",
        "on": {"workflow_dispatch": {"inputs": {"torch": {"required": True}}}},
        "permissions": {},
        "jobs": {
            "run": {
                "runs-on": "ubuntu-latest",
                "permissions": {"contents": "read"},
                "steps": [
                    {"uses": "actions/checkout@v4"},
                    {"run": "diag run --torch ${{ inputs.torch }}"},
                    {"uses": "actions/upload-artifact@v4", "with": {"name": "db", "path": "shard.db"}},
                ],
            }
        },
    }
    path.write_text(yaml.safe_dump(faulty, sort_keys=False))
    linted = _lint("actionlint", path.name, cwd=path.parent).stdout
    assert 'runtime "node20" is deprecated' in linted and "actions/checkout@v4" in linted, linted
    audited = _zizmor(path, tmp_path)
    assert audited.returncode != 0, audited.stdout
    for audit in ("template-injection", "unpinned-uses", "artipacked"):
        assert f"[{audit}]" in audited.stdout, (audit, audited.stdout)


def test_every_action_is_pinned_to_one_release_commit_on_a_current_runtime():
    """`uses: owner/repo@<sha> # vX.Y.Z`, one pin per action across the workflows (Dependabot moves
    them together, .github/dependabot.yml), and every checkout without the job's token in .git/config
    (no job pushes with git: the publish action takes its own token)."""
    pins: dict[str, set[str]] = {}
    for path in WORKFLOWS:
        for line in path.read_text().splitlines():
            if line.strip().startswith("- uses:") or line.strip().startswith("uses:"):
                ref = line.split("uses:", 1)[1].strip()
                pinned = PINNED.match(ref)
                assert pinned, f"{path.name}: {ref} is not pinned to a commit with its version"
                pins.setdefault(pinned["action"], set()).add(ref)
        for job, step in _uses(yaml.safe_load(path.read_text())):
            if step["uses"].startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False, (path.name, job)
    assert all(len(refs) == 1 for refs in pins.values()), pins
    assert {"actions/checkout", "actions/upload-artifact", "peaceiris/actions-gh-pages"} <= set(pins)
    dependabot = yaml.safe_load((REPO / ".github" / "dependabot.yml").read_text())
    assert [update["package-ecosystem"] for update in dependabot["updates"]] == ["github-actions"]


def test_each_job_holds_only_the_permissions_it_needs():
    for path in WORKFLOWS:
        workflow = yaml.safe_load(path.read_text())
        assert workflow["permissions"] == {}, path.name
        for name, job in workflow["jobs"].items():
            wanted = {"contents": "read"}
            if name == "publish":
                wanted = {"contents": "write", **({"issues": "write"} if path.name == "nightly.yml" else {})}
            assert job["permissions"] == wanted, (path.name, name)


def test_no_expression_is_expanded_into_a_shell_line():
    """An input, a matrix value or a repository name reaches a `run:` line only as a variable of the
    step's environment (`env:`), which the shell never parses as code."""
    for path in WORKFLOWS:
        for name, job in yaml.safe_load(path.read_text())["jobs"].items():
            for step in job["steps"]:
                assert "${{" not in step.get("run", ""), (path.name, name, step["run"])


def _expression(expression: str, contexts: dict[str, dict[str, str]]) -> str:
    """One ``${{ }}`` expression as GitHub evaluates the forms the workflows use: a context value
    (``inputs.torch``, ``env.X``, ``github.run_id``), a quoted literal, and ``a || b``."""
    for alternative in expression.split("||"):
        alternative = alternative.strip()
        if alternative.startswith("'"):
            return alternative.strip("'")
        context, _, key = alternative.partition(".")
        value = contexts.get(context, {}).get(key, "" if context == "inputs" else "1")
        if value:
            return value
    return ""


def _evaluated(text: str, contexts: dict[str, dict[str, str]]) -> str:
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: _expression(m.group(1), contexts), text)


def _dispatched_steps(path: Path, inputs: dict[str, str]):
    """Each step of a workflow whose shell line reads a dispatch input (a variable made from one, or
    an expression), as GitHub runs it: its expressions evaluated into the line, and the environment
    built for it (workflow, then job, then step env)."""
    workflow = yaml.safe_load(path.read_text())
    contexts: dict[str, dict[str, str]] = {"inputs": inputs, "matrix": {"shard": "0/8"}}
    for name, job in workflow["jobs"].items():
        contexts["env"], from_inputs = {}, set()
        for scope in (workflow, job):
            for key, value in scope.get("env", {}).items():
                contexts["env"][key] = _evaluated(str(value), contexts)
                if "inputs." in str(value) or any(f"env.{k}" in str(value) for k in from_inputs):
                    from_inputs.add(key)
        for step in job["steps"]:
            run = step.get("run", "")
            if "inputs." in run or any(f"${key}" in run or f"env.{key}" in run for key in from_inputs):
                yield name, _evaluated(run, contexts), contexts["env"]


HOSTILE = ("; touch pwned", "$(touch pwned)", "`touch pwned`", "' && touch pwned && echo '", '"; touch pwned; "')


@pytest.mark.slow
@pytest.mark.parametrize("workflow", ["nightly.yml", "backfill.yml"])
def test_a_hostile_dispatch_input_runs_nothing_but_diags_one_line_error(tmp_path, workflow):
    """Each dispatch input in turn, given with shell syntax after a valid value and alone, and the
    workflow's steps that read it run as GitHub runs them (bash -e, the step's environment): the one
    thing that runs is diag, which refuses the value in one line before it creates or fetches anything."""
    path = REPO / ".github" / "workflows" / workflow
    declared = yaml.safe_load(path.read_text())[True]["workflow_dispatch"]["inputs"]
    valid = {"torch": "2.13.0", "cases": "append_last", "from": "2023-06-01", "to": "2023-06-08"}
    valid.update({key: str(spec.get("default", "")) for key, spec in declared.items() if spec.get("default")})
    bash = shutil.which("bash")
    ran = 0
    for key in declared:
        for hostile in (*HOSTILE[1:], valid[key] + HOSTILE[0], valid[key] + " " + HOSTILE[2]):
            inputs = {**{k: valid[k] for k in declared}, key: hostile}
            for job, script, env in _dispatched_steps(path, inputs):
                work = tmp_path / f"{key}-{ran}"
                work.mkdir()
                done = subprocess.run(
                    [bash, "-e", "-c", script],
                    cwd=work,
                    env={**os.environ, **env, "HOME": str(work)},
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                ran += 1
                context = (workflow, job, key, hostile, done.stdout, done.stderr)
                assert done.returncode in (1, 2), context
                assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1, context
                assert not list(work.rglob("*")), (context, list(work.rglob("*")))
    assert ran >= 2 * len(declared)


def test_a_planned_matrix_is_one_actionlint_accepts(tmp_path):
    """`diag plan --json` pasted as a job's matrix: actionlint checks it, and every matrix.* the job
    reads, against the matrix's own keys (a misspelt key is found, so the check can fail)."""
    done = diag_here(
        "plan", "--part", "--case all --backend eager --no-timing", "--shards", "3", "--json", cwd=tmp_path
    )
    matrix = json.loads(done.stdout)
    assert [job["shard"] for job in matrix["include"]] == ["0/3", "1/3", "2/3"]

    def lint(expression: str) -> str:
        step = {"run": 'diag run --case all --shard "$SHARD" --db shard.db', "env": {"SHARD": expression}}
        job = {"runs-on": "ubuntu-latest", "strategy": {"matrix": matrix}, "steps": [step]}
        path = tmp_path / ".github" / "workflows" / "planned.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({"name": "planned", "on": "workflow_dispatch", "jobs": {"shard": job}}))
        return _lint("actionlint", "-shellcheck=", path.name, cwd=path.parent).stdout

    assert lint("${{ matrix.shard }}-${{ matrix.runs }}") == ""
    assert "shrad" in lint("${{ matrix.shrad }}")


def test_the_nightly_race_is_a_race_the_command_line_takes():
    """The race job's command, its expressions filled in, parses as ``diag race`` parses it: the
    append-last cache against the sliced one, without fullgraph (the sliced one breaks), swept."""
    from diag.cli import cli

    workflow = _workflow()
    (command,) = [s["run"] for s in workflow["jobs"]["race"]["steps"] if str(s.get("run", "")).startswith("diag race")]
    words = shlex.split(command.replace("$TRANSFORMERS", workflow["env"]["TRANSFORMERS"]))
    with cli.commands["race"].make_context("diag race", words[2:]) as ctx:
        params = ctx.params
    assert params["case_values"] == ("append_last", "dynamic_slice") and params["fullgraph"] is False
    assert params["torch_spec"].text == "nightly" and params["sweep"] == "batch" and params["db_path"] == "shard.db"


NODE_HARNESS = """
const calls = [];
const issues = JSON.parse(process.argv[2]);
const github = {
  paginate: async (fn, args) => { calls.push(['list', args.state, args.labels]); return issues; },
  rest: { issues: {
    listForRepo: 'listForRepo',
    createComment: async (a) => { calls.push(['comment', a.issue_number, a.body]); },
    create: async (a) => { calls.push(['create', a.title, a.labels]); },
    update: async (a) => { calls.push(['update', a.issue_number, a.state]); },
  } },
};
const context = { repo: { owner: 'o', repo: 'r' }, runId: 77 };
(async () => { %s
  console.log(JSON.stringify(calls));
})();
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed: the issue step's script is not run")
def test_the_issue_step_comments_on_a_known_cause_files_a_new_one_and_closes_one_not_seen(tmp_path):
    """The workflow's github-script, run under node against a stand-in for GitHub's API (which cannot
    be reached here), on alerts.json as diag check writes it."""
    steps = _workflow()["jobs"]["publish"]["steps"]
    script = next(s for s in steps if str(s.get("uses", "")).startswith("actions/github-script"))["with"]["script"]
    known, gone = "diag-cause:" + "a" * 16, "diag-cause:" + "b" * 16
    (tmp_path / "alerts.json").write_text(
        json.dumps(
            [
                {"title": "t1", "marker": known, "body": f"again <!-- {known} -->"},
                {"title": "t2", "marker": "diag-cause:" + "c" * 16, "body": "new"},
            ]
        )
    )
    open_issues = [
        {"number": 1, "body": f"first night <!-- {known} -->"},
        {"number": 2, "body": f"a cause not seen tonight <!-- {gone} -->"},
        {"number": 3, "body": "an issue of a row, from before causes <!-- diag-row:0123456789abcdef -->"},
    ]
    harness = tmp_path / "harness.js"
    harness.write_text(NODE_HARNESS % script)
    done = subprocess.run(
        ["node", str(harness), json.dumps(open_issues)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    calls = json.loads(done.stdout)
    assert calls[0] == ["list", "open", "diag-regression"]
    assert ["comment", 1, f"again <!-- {known} -->"] in calls and ["create", "t2", ["diag-regression"]] in calls
    closing = [c for c in calls if c[1] == 2]
    assert closing[0][0] == "comment" and "fixed" in closing[0][2] and closing[1] == ["update", 2, "closed"]
    assert not [c for c in calls if c[1] == 3]  # a row's issue from before causes is left as it is
