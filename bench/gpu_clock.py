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


def nvidia_smi_id(torch_device_index=0):
    """nvidia-smi's name for torch's CUDA device: its UUID (nvidia-smi numbers GPUs in PCI order and
    ignores CUDA_VISIBLE_DEVICES), or the index where torch does not give the UUID."""
    import torch

    uuid = getattr(torch.cuda.get_device_properties(torch_device_index), "uuid", None)
    return f"GPU-{uuid}" if uuid is not None else str(torch_device_index)


class ClockSampler:
    """Context manager; afterwards `summary()` gives (median MHz, min MHz, median W or None, reasons,
    samples), or None without samples. Sampling has begun when the `with` block starts."""

    def __init__(self, gpu_id="0"):
        self.gpu_id = gpu_id
        self.samples = []
        self._process = None

    def __enter__(self):
        smi = shutil.which("nvidia-smi")
        if smi is not None:
            fields = _FIELDS
            probe = [smi, "-i", self.gpu_id, f"--query-gpu={fields}", "--format=csv"]
            if subprocess.run(probe, capture_output=True).returncode != 0:  # (drivers before the rename)
                fields = fields.replace("clocks_event_reasons", "clocks_throttle_reasons")
            self._process = subprocess.Popen(
                [smi, "-i", self.gpu_id, f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-lms", "50"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self._parse(self._process.stdout.readline())  # (the first sample, taken before the work)
        return self

    def __exit__(self, *exc):
        if self._process is None:
            return False
        self._process.terminate()
        out, _ = self._process.communicate()
        for line in out.splitlines():
            self._parse(line)
        return False

    def _parse(self, line):
        cells = [c.strip() for c in line.split(",")]
        try:
            mhz = float(cells[0])
        except (ValueError, IndexError):  # ("[N/A]", a line cut by terminate)
            return
        try:
            watts = float(cells[1])
        except (ValueError, IndexError):  # (a GPU that does not report its power)
            watts = None
        self.samples.append((mhz, watts, cells[2] if len(cells) > 2 else ""))

    def summary(self):
        if not self.samples:
            return None
        mhz = [s[0] for s in self.samples]
        watts = [s[1] for s in self.samples if s[1] is not None]
        return (statistics.median(mhz), min(mhz), statistics.median(watts) if watts else None,
                sorted({s[2] for s in self.samples}), len(self.samples))
