"""A real local cluster for the Python checks (scripts/local-cluster: redis-server, the
coordinator, one CPU worker) on free loopback ports, and what a client process needs to use it:
test_cubridge.py's service path on the CPU and gpu_check.py's second machine on the GPU."""
import os
import socket
import subprocess

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "scripts", "local-cluster")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(folder, build):
    """Starts a cluster of `build`'s daemons keeping its state in `folder`. Returns (the
    environment that stops it, the variables a client sets: address, token file, and IR-level
    verification, which a CPU worker gives)."""
    env = dict(os.environ, CUBRIDGE_CLUSTER_DIR=folder)
    ports = [str(free_port()) for _ in range(3)]
    subprocess.run(["bash", SCRIPT, "start", "--workers", "1", "--arch", "cpu", "--build", build,
                    "--port", ports[0], "--redis-port", ports[1], "--metrics-port", ports[2]],
                   env=env, check=True, capture_output=True, timeout=180)
    client = {"CUBRIDGE_ADDRESS": "127.0.0.1:" + ports[0],
              "CUBRIDGE_TOKEN_FILE": os.path.join(folder, "client.token"),
              "CUBRIDGE_VERIFICATION": "ir"}
    return env, client


def stop(env):
    subprocess.run(["bash", SCRIPT, "stop"], env=env, capture_output=True, timeout=120)
