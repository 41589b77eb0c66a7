"""The inference side of Lyra (lyra.md §1, §2.1, §2.3; DESIGN.md "loaning/").

- `demand`: inference demand over time (seeded diurnal generator, CSV `time,busy_servers`, DeepBoot rows);
- `timeline`: demand → loanable-server timeline (`LoanPlan`, with headroom and a reclaim notice period);

Which loaned servers to return on a reclaim is a policy's decision (`policies/_reclaim.py`, shared by the lyra
and elastisched wings); the loan-aware placement is Lyra's own (`policies/lyra/placement.py`).

Pure parts only: the experiments that use them (`reproduce lyra`, `lyra-deepboot`) live in `experiments/`.
"""

from elastisched.loaning.demand import DemandSeries, diurnal, from_csv, from_inference_tasks, low_stretches
from elastisched.loaning.timeline import LoanPlan, loan_plan

__all__ = ["DemandSeries", "LoanPlan", "diurnal", "from_csv", "from_inference_tasks", "loan_plan", "low_stretches"]
