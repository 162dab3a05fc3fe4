"""`python -m icepack_gateway`: run the gateway service with settings from the environment."""

from icepack_core.cli.services import run_service_main

if __name__ == "__main__":
    run_service_main("gateway")
