from pathlib import Path

assert Path("/app/greeting.txt").read_text().strip() == "hello, world"
