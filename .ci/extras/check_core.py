"""`pip install tarry`, no extra: `tarry demo` runs its chat across three processes on SQLite."""

from __future__ import annotations

from common import from_the_wheel, passed, tarry_command

if __name__ == "__main__":
    from_the_wheel()
    done = tarry_command("demo")
    print(done.stdout)
    passed("core", "`tarry demo` finished its chat")
