"""One process of the test process trees (``evocamp_test_plugin.process_tree``).

``python -S tree_node.py PIDFILE DEPTH``: ignores SIGTERM, appends its pid to
PIDFILE, starts ``DEPTH - 1`` more generations of itself through ``subprocess``,
then sleeps ten minutes. Only SIGKILL ends it early.
"""

import os
import signal
import subprocess
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
pidfile, depth = sys.argv[1], int(sys.argv[2])
with open(pidfile, "a") as noted:
    noted.write(f"{os.getpid()}\n")
if depth > 1:
    subprocess.Popen([sys.executable, "-S", __file__, pidfile, str(depth - 1)])
time.sleep(600)
