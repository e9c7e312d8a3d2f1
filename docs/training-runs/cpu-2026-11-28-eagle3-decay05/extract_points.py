"""Write the learning-curve points a partial checkpoint holds (a run stopped mid-training) to partial-curve.json.

Run:  python docs/training-runs/cpu-2026-11-28-eagle3-decay05/extract_points.py /work/e3/eagle3-3000x2-v16384-sd05.partial.pt
"""

import json
import sys
from pathlib import Path

import torch

state = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
out = Path(__file__).with_name("partial-curve.json")
out.write_text(json.dumps({"steps": state["steps"], "seconds": state["seconds"], "points": state["batches"]["points"]},
                          indent=1) + "\n")
print(out)
