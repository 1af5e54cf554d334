"""Other packages extend hista without touching it (CONTRIBUTING.md "From another package"): a
throwaway distribution with entry points in the groups hista.estimators, hista.losses,
hista.tasks and hista.verifiers, put on the path of a fresh interpreter, shows its estimator in
`hista sveb eval --methods`, its loss in `policy_loss`, its task source in `tasks.load` and its
verifier in a JSONL task file. The registries' own rules (duplicates) are tested here too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from hista.cli import main

pytestmark = pytest.mark.xdist_group("plugins")  # its module fixtures are built once (tests/conftest.py)

PLUGIN = textwrap.dedent('''
    """A third-party plugin for hista (test fixture)."""
    import dataclasses

    import torch

    from hista.estimators import Estimator, EstimatorConfig
    from hista.estimators import register as register_estimator
    from hista.losses import register as register_loss
    from hista.losses.base import clipped_surrogate
    from hista.rewards import register as register_verifier
    from hista.tasks import TaskSource


    @dataclasses.dataclass
    class ShrunkConfig(EstimatorConfig):
        weight: float = 0.5


    class ShrunkMean(Estimator):
        """V = weight x the group mean (named by an entry point, registered by hista)."""

        label = "Shrunk"
        config_class = ShrunkConfig

        def _raw_advantages(self, group, gae_lambda):
            v = self.config.weight * float(group.rewards.mean())
            return [torch.full((len(r.completion_ids),), r.reward - v) for r in group.rollouts]

        def state_values(self, group, states):
            return torch.full((len(states),), self.config.weight * float(group.rewards.mean()))


    @register_loss("half_dapo", aggregation="token-mean")
    def half_dapo(b, *, eps_low=0.2, eps_high=0.28):
        """DAPO on half the advantages."""
        return clipped_surrogate(torch.exp(b.log_ratio), 0.5 * b.adv, eps_low, eps_high)


    class Countdown(TaskSource):
        description = "count down from N: demo:N"

        def load(self, rest, n=None, seed=0, split="test"):
            top = int(rest)
            rows = [{"id": f"demo-{k}", "problem": f"What comes before {k}?", "answer": str(k - 1),
                     "verifier": "exact", "field": "demo"} for k in range(top, 0, -1)]
            return rows if n is None else rows[:n]

        def check(self, rest):
            int(rest)

        def example(self, tmp_dir):
            return "3"


    @register_verifier("exact")
    def exact(completion, answer):
        return float(str(completion).strip() == str(answer)), "exact match"
''')

ENTRY_POINTS = textwrap.dedent("""
    [hista.estimators]
    shrunk = hista_demo_plugin:ShrunkMean

    [hista.losses]
    half_dapo = hista_demo_plugin

    [hista.tasks]
    demo = hista_demo_plugin:Countdown

    [hista.verifiers]
    exact = hista_demo_plugin
""")

CHECK = textwrap.dedent("""
    import json, sys, torch
    from hista import estimators, losses, rewards, tasks
    from hista.losses import policy_loss

    logp = torch.log(torch.tensor([[0.5, 0.4], [0.3, 0.2]], requires_grad=True))
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 2)
    half, _ = policy_loss("half_dapo", logp, logp.detach(), adv, mask)
    dapo, _ = policy_loss("dapo", logp, logp.detach(), 0.5 * adv, mask)
    records = tasks.load("demo:4", n=2)
    tmp = sys.argv[1]
    with open(tmp + "/t.jsonl", "w") as fh:
        fh.write(json.dumps({"problem": "1+1", "answer": "2", "verifier": "exact"}) + "\\n")
    print(json.dumps({
        "estimators": estimators.names(), "losses": losses.names(), "tasks": tasks.names(),
        "verifiers": rewards.names(), "half": float(half), "dapo": float(dapo),
        "records": [r["id"] for r in records], "jsonl": tasks.load("jsonl:" + tmp + "/t.jsonl")[0]["verifier"],
        "verify": rewards.verify("exact", " 2 ", "2"),
        "shrunk": estimators.get("shrunk", weight=0.25).config.weight,
    }))
""")


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    (root / "hista_demo_plugin.py").write_text(PLUGIN)
    info = root / "hista_demo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hista-demo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def _env(plugin_path):
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_path), os.environ.get("PYTHONPATH", "")])}


def test_plugin_components_are_found_through_entry_points(plugin_path, tmp_path):
    proc = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path)], env=_env(plugin_path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "shrunk" in got["estimators"] and "grpo" in got["estimators"]
    assert "half_dapo" in got["losses"] and "demo" in got["tasks"] and "exact" in got["verifiers"]
    assert got["half"] == pytest.approx(got["dapo"])  # the plugin loss runs through policy_loss
    assert got["records"] == ["demo-4", "demo-3"] and got["jsonl"] == "exact" and got["verify"] == 1.0
    assert got["shrunk"] == 0.25


def test_plugin_estimator_in_sveb_eval(plugin_path, tmp_path):
    cases = tmp_path / "cases.jsonl"
    assert main(["sveb", "build", "--model", "tiny", "--tasks", "builtin:arith", "--problems", "2", "--rollouts",
                 "4", "--continuations", "2", "--max-new-tokens", "4", "--no-filter", "--out", str(cases)]) == 0
    results = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "hista.cli", "sveb", "eval", "--cases", str(cases), "--methods",
                           "grpo,shrunk?weight=0.5", "--out", str(results)], env=_env(plugin_path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(results.read_text())
    assert data["methods"]["shrunk?weight=0.5"]["name"] == "shrunk" and "Shrunk?weight=0.5" in proc.stdout
    for row in data["cases"]:
        assert row["values"]["shrunk?weight=0.5"] == pytest.approx(0.5 * row["values"]["grpo"])


def test_registering_a_taken_name_needs_replace():
    from hista import estimators, losses, rewards, tasks
    from hista.estimators.group_mean import GroupMean

    with pytest.raises(ValueError, match="already registered"):
        estimators.register("hista")(type("Other", (GroupMean,), {}))
    with pytest.raises(ValueError, match="already registered"):
        losses.register("dapo", aggregation="token-mean")(lambda b: None)
    with pytest.raises(ValueError, match="already registered"):
        rewards.register("math")(lambda c, a: (1.0, "yes"))
    with pytest.raises(ValueError, match="already registered"):
        tasks.register("jsonl")(type("OtherJsonl", (type(tasks.get("jsonl")),), {}))
    old = estimators.REGISTRY.lookup("grpo")
    try:
        replacement = estimators.register("grpo", replace=True)(type("Replacement", (GroupMean,), {}))
        assert estimators.get("grpo").__class__ is replacement
    finally:
        estimators.REGISTRY.register("grpo", old, replace=True)
    assert type(estimators.get("grpo")) is old


def test_verl_check_without_verl_says_how_to_install(capsys):
    """hista verl check in an environment without verl: exit 2, and how to install it."""
    import importlib.util

    from hista.cli import main

    if importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is installed here (tests/integrations/test_verl.py covers the plugin)")
    assert main(["verl", "check"]) == 2
    assert "pip install 'hista[verl]'" in capsys.readouterr().err
