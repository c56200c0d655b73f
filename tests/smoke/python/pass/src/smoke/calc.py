from datetime import datetime
from zoneinfo import ZoneInfo


def add(a: int, b: int) -> int:
    return a + b


def tokyo_hour(utc: datetime) -> int:
    return utc.astimezone(ZoneInfo("Asia/Tokyo")).hour
