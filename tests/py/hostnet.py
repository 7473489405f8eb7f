"""tests/py/hostnet.py - several "hosts" on one machine for a test: Linux
network namespaces joined by one bridge, with addresses of the test's own.

Net(["pg", "s3", ...]) makes a namespace per host plus a "switch"
namespace holding a bridge; each host gets lo and one veth (eth0) on the
bridge with the address 10.250.0.N/24 (N from the host's index). The
bridge lives in the switch namespace, not in the machine's own network, so
nothing here is reachable from the machine or from outside, two tests can
use the same addresses at once, and a host's only routes are lo and
10.250.0.0/24: traffic goes nowhere but between the test's hosts.

  net.addr("pg")            its address
  net.cmd("pg", argv)       argv run inside that host (ip netns exec)
  net.enter("c1")           the calling thread's sockets are c1's from now
                            on (setns(2) changes one thread's namespace)
  net.cut("pg")             the host's cable pulled: its port on the bridge
                            goes down, so every packet to or from it is
                            dropped without a word (no RST, no ICMP from
                            the host): its peers' connections go half-open
  net.mend("pg")            the cable back
  net.close()               every namespace deleted (with it, every veth and
                            the bridge); kill what runs in them first

Needs root (CAP_SYS_ADMIN) and iproute2; Net raises harness.Skip with the
reason when namespaces cannot be made. Namespaces are named
jmh<pid>-<host>; a run killed before close leaves them, and the next Net
deletes those whose process is gone.
"""
import ctypes
import os
import subprocess

from harness import Skip

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/var/run/netns"
SUBNET = "10.250.0"


def _ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def _sweep_stale():
    try:
        names = os.listdir(NETNS_DIR)
    except OSError:
        return
    for n in names:
        if not n.startswith("jmh") or "-" not in n:
            continue
        pid = n[3:].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            _ip("netns", "del", n, check=False)
        except PermissionError:
            pass


class Net:
    def __init__(self, hosts):
        if os.geteuid() != 0:
            raise Skip("network namespaces need root")
        if subprocess.run(["which", "ip"], capture_output=True).returncode != 0:
            raise Skip("iproute2 (ip) is not installed")
        _sweep_stale()
        self.prefix = f"jmh{os.getpid()}"
        self.hosts = {}
        self.ports = {}  # host -> its veth on the bridge (in the switch namespace)
        self.made = []
        self.sw = f"{self.prefix}-sw"
        r = _ip("netns", "add", self.sw, check=False)
        if r.returncode != 0:
            raise Skip(f"cannot make a network namespace: {r.stderr.strip()}")
        self.made.append(self.sw)
        try:
            _ip("-n", self.sw, "link", "set", "lo", "up")
            _ip("-n", self.sw, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.sw, "link", "set", "br0", "up")
            for i, h in enumerate(hosts):
                ns = f"{self.prefix}-{h}"
                addr = f"{SUBNET}.{10 + i}"
                _ip("netns", "add", ns)
                self.made.append(ns)
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", self.sw, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("-n", self.sw, "link", "set", f"v{i}", "master", "br0", "up")
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                self.hosts[h] = (ns, addr)
                self.ports[h] = f"v{i}"
        except Exception:
            self.close()
            raise

    def addr(self, host):
        return self.hosts[host][1]

    def ns(self, host):
        return self.hosts[host][0]

    def cmd(self, host, argv):
        return ["ip", "netns", "exec", self.ns(host), *argv]

    def enter(self, host):
        fd = os.open(os.path.join(NETNS_DIR, self.ns(host)), os.O_RDONLY)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(fd, CLONE_NEWNET) != 0:
                e = ctypes.get_errno()
                raise OSError(e, f"setns {host}: {os.strerror(e)}")
        finally:
            os.close(fd)

    def cut(self, host):
        _ip("-n", self.sw, "link", "set", self.ports[host], "down")

    def mend(self, host):
        _ip("-n", self.sw, "link", "set", self.ports[host], "up")

    def close(self):
        for ns in reversed(self.made):
            _ip("netns", "del", ns, check=False)
        self.made = []
