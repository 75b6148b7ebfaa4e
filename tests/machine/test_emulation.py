"""An image of another architecture run through qemu-user (the arm64 image on an x86-64 host):
labkit doctor says the emulator, not seccomp or the kernel, refused what it does not translate.

The kernel's answers are stood in for (its /proc/cpuinfo, each call's errno); what qemu-user 7.2
answers for real in the arm64 image is in container/README.md."""

from __future__ import annotations

import errno

import pytest

from labkit import confinement, doctor, syscall_probe

X86_CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
ARM64_CPUINFO = "processor\t: 0\nBogoMIPS\t: 48.00\nCPU implementer\t: 0x61\nCPU part\t: 0x000\n"


@pytest.fixture
def aarch64_on(tmp_path, monkeypatch):
    """This process as aarch64 on a kernel whose /proc/cpuinfo is the text given, behind a
    seccomp filter, with io_uring_setup and perf_event_open answering ENOSYS."""
    def machine(cpuinfo: str) -> None:
        (tmp_path / "cpuinfo").write_text(cpuinfo)
        monkeypatch.setattr(syscall_probe, "CPUINFO", tmp_path / "cpuinfo")
        monkeypatch.setattr(syscall_probe.platform, "machine", lambda: "aarch64")
        monkeypatch.setattr(syscall_probe, "_io_uring_setup", lambda: errno.ENOSYS)
        monkeypatch.setattr(syscall_probe, "_perf_event_open", lambda: errno.ENOSYS)
        monkeypatch.setattr(syscall_probe, "_unshare", lambda: 0)
        monkeypatch.setattr(syscall_probe, "_sysctl", lambda name: None)
        monkeypatch.setattr(confinement, "seccomp", lambda pid="self": confinement.Seccomp("filter", 1))
    return machine


def test_calls_qemu_user_does_not_translate_are_the_emulators_not_the_filters(aarch64_on):
    aarch64_on(X86_CPUINFO)
    assert syscall_probe.emulated()
    refused = syscall_probe.refusals()
    assert [r.call for r in refused] == ["io_uring_setup", "perf_event_open"]
    assert all(r.error == "ENOSYS" and r.by.startswith("the emulator") for r in refused)
    assert doctor.find_seccomp().status == doctor.OK
    [found] = doctor.find_emulation()
    assert found.status == doctor.WARN and "qemu-user" in found.detail
    assert "io_uring_setup (ENOSYS): no uring server" in found.detail
    assert "perf_event_open (ENOSYS): no perf counters" in found.detail
    assert "container/image.sh" in found.fix


def test_on_its_own_architecture_the_filter_is_blamed_as_before(aarch64_on):
    aarch64_on(ARM64_CPUINFO)
    assert not syscall_probe.emulated()
    assert {r.by for r in syscall_probe.refusals()} == {"seccomp"}
    assert doctor.find_emulation() == []
    assert doctor.find_seccomp().status == doctor.WARN


def test_an_unreadable_cpuinfo_is_not_taken_for_emulation(tmp_path, monkeypatch):
    monkeypatch.setattr(syscall_probe, "CPUINFO", tmp_path / "missing")
    assert not syscall_probe.emulated()
