"""The ``wire:`` config group and its deprecated aliases (top-level ``comm`` and ``faults``).

The group's keys are exactly :class:`~lightning_fed.comm.Wire`'s arguments; the old spelling builds
the same wire (with a one-line notice), both spellings at once are a one-line error, and the
fingerprint of a config does not depend on the spelling (so runs from before the move resume).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from lightning_fed.comm import BFloat16Hook, IdentityHook, Wire
from lightning_fed.fit_parser import WIRE_ALIASES, fit_parser, wire_from
from lightning_fed.runfolder.fingerprint import changed_keys, config_fingerprint, fingerprinted

ROOT = Path(__file__).resolve().parents[2]
FAULTS = "{unavailable: {1: [0, 2]}, corrupt: {2: {1: {scale: 10}}}, dropout: {3: 4}}"


def _parse(argv: list[str]) -> tuple[object, Wire]:
    parser = fit_parser()
    cfg = parser.parse_args(argv)
    cfg.pop("config", None)
    return cfg, wire_from(parser.instantiate(cfg))


def _same(a: Wire, b: Wire) -> bool:
    return (type(a.hook), repr(a.faults), a.max_norm_ratio) == (
        type(b.hook),
        repr(b.faults),
        b.max_norm_ratio,
    )


def test_the_wire_group_holds_exactly_the_wire_arguments() -> None:
    cfg, wire = _parse([])
    assert set(vars(cfg.wire)) == set(inspect.signature(Wire.__init__).parameters) - {"self", "ledger"}
    assert isinstance(wire.hook, IdentityHook) and wire.faults is None and wire.max_norm_ratio == 5.0
    assert not {"comm", "faults"} & set(vars(cfg))  # the aliases are folded away


def test_old_keys_on_the_command_line_give_the_same_wire(capsys: pytest.CaptureFixture) -> None:
    old_cfg, old = _parse(
        ["--comm=lightning_fed.comm.BFloat16Hook", f"--faults={FAULTS}", "--wire.max_norm_ratio=3"]
    )
    err = capsys.readouterr().err
    assert "config key 'comm' is deprecated: write it as 'wire.hook'" in err
    assert "config key 'faults' is deprecated: write it as 'wire.faults'" in err
    new_cfg, new = _parse(
        ["--wire.hook=lightning_fed.comm.BFloat16Hook", f"--wire.faults={FAULTS}", "--wire.max_norm_ratio=3"]
    )
    assert "deprecated" not in capsys.readouterr().err
    assert isinstance(new.hook, BFloat16Hook) and new.faults.dropout == {3: 4} and new.max_norm_ratio == 3.0
    assert _same(old, new)
    assert old_cfg.as_dict() == new_cfg.as_dict()


def test_old_keys_in_a_config_file_give_the_same_wire_and_fingerprint(tmp_path: Path) -> None:
    old_file, new_file = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old_file.write_text(f"comm:\n  class_path: lightning_fed.comm.BFloat16Hook\nfaults: {FAULTS}\n")
    new_file.write_text(
        f"wire:\n  hook:\n    class_path: lightning_fed.comm.BFloat16Hook\n  faults: {FAULTS}\n"
    )
    old_cfg, old = _parse(["--config", str(old_file)])
    new_cfg, new = _parse(["--config", str(new_file)])
    assert _same(old, new)
    assert config_fingerprint(old_cfg.as_dict()) == config_fingerprint(new_cfg.as_dict())


def test_fingerprints_keep_the_keys_they_began_with() -> None:
    """A checkpoint written before the move stores ``comm.class_path`` and ``faults``: a config in the
    new spelling matches it, and a real change is named by its new key."""
    cfg, _ = _parse(["--wire.hook=lightning_fed.comm.BFloat16Hook"])
    flat = fingerprinted(cfg.as_dict())
    assert flat["comm.class_path"] == "lightning_fed.comm.BFloat16Hook" and flat["faults"] is None
    assert not any(k.startswith(("wire.hook", "wire.faults")) for k in flat)
    other, _ = _parse([])
    assert changed_keys(flat, other.as_dict()) == ["wire.hook.class_path"]


@pytest.mark.parametrize(("old", "new"), [(f"--{o}", f"--wire.{n}") for o, n in WIRE_ALIASES.items()])
def test_an_alias_and_its_new_key_in_one_source_are_a_one_line_error(
    old: str, new: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    value = "lightning_fed.comm.BFloat16Hook" if "hook" in new else FAULTS
    key, alias = new[2:], old[2:]
    both = tmp_path / "both.yaml"
    both.write_text(f"{alias}: {value}\nwire:\n  {key.split('.')[1]}: {value}\n")
    for argv, source in (
        ([f"{old}={value}", f"{new}={value}"], "the command line"),
        (["--config", str(both)], f"config {both}"),
    ):
        with pytest.raises(SystemExit) as exc:
            _parse(argv)
        assert exc.value.code == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"lightning-fed: error: {source} sets both {alias} and {key}: keep {key} only "
            f"({alias} is its deprecated alias)"
        ]


def test_a_later_source_overrides_an_earlier_whichever_spelling(tmp_path: Path) -> None:
    """A shipped config (``wire.hook``) overridden by the old ``--comm`` sends what the command line
    says, as before the move; and an old-spelling layer over a new one (or the reverse) wins."""
    shipped = str(ROOT / "configs" / "abps.yaml")
    assert isinstance(_parse(["--config", shipped])[1].hook, IdentityHook)
    assert isinstance(
        _parse(["--config", shipped, "--comm=lightning_fed.comm.BFloat16Hook"])[1].hook, BFloat16Hook
    )
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text("comm:\n  class_path: lightning_fed.comm.BFloat16Hook\nfaults: {dropout: {1: 2}}\n")
    new.write_text("wire:\n  hook:\n    class_path: lightning_fed.comm.IdentityHook\n  faults: null\n")
    wire = _parse(["--config", str(new), "--config", str(old)])[1]
    assert isinstance(wire.hook, BFloat16Hook) and wire.faults.dropout == {1: 2}
    wire = _parse(["--config", str(old), "--config", str(new)])[1]
    assert isinstance(wire.hook, IdentityHook) and wire.faults is None
    wire = _parse(["--config", str(old), "--wire.hook=lightning_fed.comm.IdentityHook"])[1]
    assert isinstance(wire.hook, IdentityHook) and wire.faults.dropout == {1: 2}


def test_shipped_configs_use_the_wire_group(capsys: pytest.CaptureFixture) -> None:
    """No shipped config spells the wire the old way (parsing them prints no deprecation notice)."""
    hooked = [p for p in sorted((ROOT / "configs").glob("*.yaml")) if "wire:" in p.read_text()]
    assert len(hooked) >= 10
    for path in hooked:
        assert not any(line.startswith(("comm:", "faults:")) for line in path.read_text().splitlines())
        _cfg, wire = _parse(["--config", str(path)])
        assert "deprecated" not in capsys.readouterr().err, path
        assert type(wire.hook).__name__ in {"IdentityHook", "BFloat16Hook"}
