"""One harness per fake platform (issue 23): how a test starts the fake server, builds the real
SDK's adapter on it, serves it alone or in a BotApp (tests/engine_helpers.py's `running_app`), or
runs `switchboard run` against it, written once. `surface.py` and `process.py` are what the three
platforms share; `telegram.py`, `slack.py` and `discord.py` are each platform's own."""
