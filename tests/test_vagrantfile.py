"""The Vagrantfile (three VMs: client, censor, servers) validates, and a broken one does not.

``vagrant validate -p`` checks the file without any provider or box, which is
all CI can do (no VM boots here). scripts/setup installs vagrant with
``--no-install-recommends``, so this runs in CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not shutil.which("vagrant"),
                                reason="vagrant is not installed (scripts/setup installs it)")


def validate(text: str, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "Vagrantfile").write_text(text)
    env = {**os.environ, "VAGRANT_CHECKPOINT_DISABLE": "1", "VAGRANT_HOME": str(tmp_path / "vh"),
           **extra}
    return subprocess.run(["vagrant", "validate", "-p"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_vagrantfile_validates(tmp_path):
    text = (REPO / "Vagrantfile").read_text()
    proc = validate(text, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "validated successfully" in proc.stdout
    # Three machines on the lab's address range, two isolated networks.
    for name in ("client", "censor", "servers"):
        assert f'"{name}"' in text
    assert "debian/bookworm64" in text and 'provider "libvirt"' in text
    assert 'provider "virtualbox"' in text and "scripts/setup" in text


def test_with_a_ptlab_box_it_validates_and_names_that_box(tmp_path):
    """PTLAB_VM_BOX (a box from 'ptlab vm image --vagrant-box') replaces Vagrant
    Cloud's box; that box needs no setup provisioner, and the file says so."""
    text = (REPO / "Vagrantfile").read_text()
    proc = validate(text, tmp_path, PTLAB_VM_BOX="ptl-local")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'BOX = PTLAB_BOX || "debian/bookworm64"' in text
    assert "unless PTLAB_BOX" in text


@pytest.mark.parametrize("edit, complaint", [
    (("m.vm.hostname = ", "m.vm.bogus_option = 1\n      m.vm.hostname = "), "bogus_option"),
    (('m.vm.hostname = "ptl-#{name}"', 'm.vm.hostname = "bad_name!"'), "hostname"),
])
def test_a_broken_vagrantfile_fails(tmp_path, edit, complaint):
    text = (REPO / "Vagrantfile").read_text()
    assert edit[0] in text
    proc = validate(text.replace(*edit, 1), tmp_path)
    assert proc.returncode != 0
    assert complaint in proc.stdout + proc.stderr
