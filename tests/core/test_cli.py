"""`python -m pycoop` runs the same command line as the `pycoop` script."""
import subprocess
import sys


def test_python_dash_m_runs_the_demo():
    r = subprocess.run([sys.executable, "-m", "pycoop", "demo", "--backend", "emulator", "--size", "128"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "backend: emulator" in r.stdout and "-> OK" in r.stdout


def test_python_dash_m_reports_usage_errors():
    r = subprocess.run([sys.executable, "-m", "pycoop", "no-such-command"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode != 0 and "invalid choice" in r.stderr
