"""The Serve configs, shipped inside the server distribution as ``dialscore_server.deployments``
(see pyproject.toml), so the commands find them after a plain ``pip install``."""
