"""What only the server installs: a client test that imports one of these fails where the client
alone is installed (``.venv-client``)."""

SERVER_ONLY = ("dialscore_server", "torch", "transformers", "ray", "fastapi", "starlette",
               "uvicorn")
