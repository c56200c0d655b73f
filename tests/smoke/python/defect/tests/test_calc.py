from smoke.calc import add


def test_add_seeded_defect() -> None:
    assert add(2, 2) == 5, "SEEDED-DEFECT"
