"""`python -m icepack_inspector`: run the inspector service with settings from the environment."""

from icepack_core.cli.services import run_service_main

if __name__ == "__main__":
    run_service_main("inspector")
