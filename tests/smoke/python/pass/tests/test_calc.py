from datetime import UTC, datetime

from smoke.calc import add, tokyo_hour


def test_add() -> None:
    assert add(2, 3) == 5


def test_tzdata() -> None:
    assert tokyo_hour(datetime(2026, 1, 1, 0, 0, tzinfo=UTC)) == 9


def test_utf8(tmp_path) -> None:
    p = tmp_path / "ünïcode.txt"
    p.write_text("砂場", encoding="utf-8")
    assert p.read_text(encoding="utf-8") == "砂場"
