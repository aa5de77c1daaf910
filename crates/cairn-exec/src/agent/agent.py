# Cairn's step agent: stdlib only, sent whole with every request (nothing is installed on the
# target). It runs on the controller host, locally or over SSH, reads one JSON line
# {"agent": [[<file name>, <its source>], ...], "request": {...}} from stdin, and answers with JSON
# lines on stdout. BOOT runs this file with the request and every file of the agent at hand; the
# others are imported from what was sent (a Slurm job gets a copy of them all and runs
# `python3 agent.py supervise.json`).
#
# Its files, by role: agent_wire (the protocol: reading requests, framing answers),
# agent_launch (launching and supervising a step, serving a connection), agent_follow (following a
# launch to its end, re-attaching, cancelling), agent_proc (processes and the attempt records),
# agent_files (hashing, walking and checking files, once), agent_artifacts (outputs, checks,
# materialising, a working copy's changes, a job's files), agent_seed (seeding a working copy) and
# agent_host (readiness, deployment, reading files). Cairn's side of the protocol is
# `agent::protocol`.
#
# Imported as a module (by Cairn's tests), it runs nothing.
import importlib.util, os, sys


class Sent:
    """Imports this agent's other files from the sources Cairn sent with the request (nothing of
    the agent is on the target's disk)."""

    def __init__(self, sources):
        self.sources = sources

    def find_spec(self, name, path=None, target=None):
        if name + ".py" in self.sources:
            return importlib.util.spec_from_loader(name, self, origin=name + ".py")
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__name__ + ".py"
        exec(compile(self.sources[name], name, "exec"), module.__dict__)


if "SOURCES" in globals():  # sent by Cairn: BOOT gives every file of the agent
    sys.meta_path.insert(0, Sent(SOURCES))
else:  # a file: a Slurm job's copy (run with -I, so its folder is not on sys.path), or Cairn's tests
    sys.dont_write_bytecode = True
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))

# Cairn's tests reach the agent's functions through this module, and stand in for Slurm's commands
# through its shutil and subprocess (the modules every file shares).
import shutil, subprocess

from agent_artifacts import op_changed, op_check, op_files, op_materialize, op_outputs
from agent_files import read_json
from agent_follow import op_cancel, op_wait
from agent_host import op_deploy, op_read, op_ready, op_tail
from agent_launch import launch_slurm, op_run, op_serve, op_supervise, prepare_attempt, step_env
from agent_seed import op_seed
from agent_wire import FILES, PROTOCOL, Invalid, handle, parse_request

OPS = {"ready": op_ready, "deploy": op_deploy, "run": op_run, "serve": op_serve, "wait": op_wait,
       "cancel": op_cancel, "tail": op_tail, "outputs": op_outputs, "check": op_check, "materialize": op_materialize,
       "changed": op_changed, "read": op_read, "files": op_files, "seed": op_seed}


def main(msg):
    handle(msg, OPS)


if __name__ == "cairn_agent":  # sent by Cairn: BOOT gives the request
    main(REQUEST)
elif __name__ == "__main__":  # a Slurm job: `python3 agent.py supervise.json` in its attempt directory
    handle(read_json(sys.argv[1]), {"supervise": op_supervise})
