# SPDX-License-Identifier: Apache-2.0
"""The SM clock while a block of GPU work runs, sampled by nvidia-smi every 50 ms.

The benchmarks print it beside their timings. Under its power cap the GPU lowers its clock by an
amount that depends on which kernels run: kernels timed interleaved share one clock, and a kernel
timed alone can run at another (on the H200, sage8 alone held 1980 MHz where, interleaved with
exact and cuDNN, it ran at about 1710). Without nvidia-smi the sampler records nothing.
"""
import shutil
import statistics
import subprocess

_FIELDS = "clocks.sm,power.draw,clocks_event_reasons.active"


class ClockSampler:
    """Context manager; afterwards `summary()` gives (median MHz, min MHz, median W, reasons), or None."""

    def __init__(self, device_index=0):
        self.device_index = device_index
        self.samples = []
        self._process = None

    def __enter__(self):
        smi = shutil.which("nvidia-smi")
        if smi is not None:
            fields = _FIELDS
            probe = [smi, "-i", str(self.device_index), f"--query-gpu={fields}", "--format=csv"]
            if subprocess.run(probe, capture_output=True).returncode != 0:  # (drivers before the rename)
                fields = fields.replace("clocks_event_reasons", "clocks_throttle_reasons")
            self._process = subprocess.Popen(
                [smi, "-i", str(self.device_index), f"--query-gpu={fields}", "--format=csv,noheader,nounits",
                 "-lms", "50"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return self

    def __exit__(self, *exc):
        if self._process is None:
            return False
        self._process.terminate()
        out, _ = self._process.communicate()
        for line in out.splitlines():
            cells = [c.strip() for c in line.split(",")]
            try:
                self.samples.append((float(cells[0]), float(cells[1]), cells[2]))
            except (ValueError, IndexError):  # ("[N/A]" cells, a line cut by terminate)
                pass
        return False

    def summary(self):
        if not self.samples:
            return None
        mhz = [s[0] for s in self.samples]
        return (statistics.median(mhz), min(mhz), statistics.median(s[1] for s in self.samples),
                sorted({s[2] for s in self.samples}))
