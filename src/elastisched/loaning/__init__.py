"""The inference side of Lyra (lyra.md §1, §2.1, §2.3; DESIGN.md "loaning/").

- `demand`: inference demand over time (seeded diurnal generator, CSV `time,busy_servers`, DeepBoot rows);
- `timeline`: demand → loanable-server timeline (`LoanPlan`, with headroom and a reclaim notice period);
- `reclaim`: which loaned servers to return (Lyra greedy, DeepBoot's rule, random, exact MILP);
- `placement`: loan-aware best-fit-decreasing placement used by the `lyra` policy.

Pure parts only: the experiments that use them (`reproduce lyra`, `lyra-deepboot`) live in `experiments/`.
"""

from elastisched.loaning.demand import DemandSeries, diurnal, from_csv, from_inference_tasks, low_stretches
from elastisched.loaning.reclaim import METHODS, Holding, ReclaimChoice, choose, evaluate, holdings_from_snapshot
from elastisched.loaning.timeline import LoanPlan, loan_plan

__all__ = ["METHODS", "DemandSeries", "Holding", "LoanPlan", "ReclaimChoice", "choose", "diurnal", "evaluate",
           "from_csv", "from_inference_tasks", "holdings_from_snapshot", "loan_plan", "low_stretches"]
