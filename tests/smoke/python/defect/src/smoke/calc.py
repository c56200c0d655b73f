import os


def add(a: int, b: int) -> int:
    return a + b


def label(n: int) -> int:
    return "n=" + str(n)
