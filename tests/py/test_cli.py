"""Every binary answers --help (with an example) and --version, and a bad
command line gets exit status 2 and one clear line on stderr."""
from harness import binary, run

BINS = ["jobd", "jobworker", "jobctl"]


def test_help_and_version():
    for b in BINS:
        r = run([binary(b), "--help"])
        assert r.returncode == 0, (b, r.stderr)
        assert "usage:" in r.stdout and "example:" in r.stdout, (b, r.stdout)
        assert "--log-format" in r.stdout
        r = run([binary(b), "--version"])
        assert r.returncode == 0
        assert r.stdout.startswith(b + " "), r.stdout


def test_bad_flags_are_usage_errors():
    for b in BINS:
        r = run([binary(b), "--no-such-flag"])
        assert r.returncode == 2, (b, r.returncode)
        assert r.stderr.startswith(f"{b}: unknown option '--no-such-flag'"), r.stderr
        r = run([binary(b), "--log-level", "loud"])
        assert r.returncode == 2, (b, r.stderr)
        assert "--log-level" in r.stderr
    r = run([binary("jobworker"), "--self-check", "--spec", "always"])
    assert r.returncode == 2 and "unknown --spec 'always'" in r.stderr, r.stderr
    r = run([binary("jobworker"), "--self-check", "--spec-max-seqs", "0"])
    assert r.returncode == 2 and "--spec-max-seqs" in r.stderr, r.stderr


def test_environment_feeds_options_and_flags_win():
    r = run([binary("jobworker"), "--self-check"], env={"JOBWORKER_DEVICE": "tpu"})
    assert r.returncode == 2 and "unknown device 'tpu'" in r.stderr, r.stderr
    r = run([binary("jobworker"), "--self-check", "--device", "cpu"],
            env={"JOBWORKER_DEVICE": "tpu"})
    assert r.returncode == 0, r.stderr


def test_worker_self_check_cpu():
    r = run([binary("jobworker"), "--self-check", "--device", "cpu"])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if l.strip()]
    assert len(lines) == 2 and all(l.endswith(" ok") for l in lines), r.stdout
