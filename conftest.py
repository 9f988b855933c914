pytest_plugins = ["fuzz.plugin"]
