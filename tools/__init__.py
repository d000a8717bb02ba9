"""Training scripts, run by hand or by make (`python -m tools.train_scenedet`); nothing
the server, the engine or an app imports."""
