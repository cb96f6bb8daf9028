import sys, time, itertools, random
sys.path.insert(0, "tests")
from test_policy_options import _runs, OPTIONS, NOISE
random.seed(int(sys.argv[1]))
t0 = time.time(); n = 0; worst = []
while time.time() - t0 < float(sys.argv[2]):
    engine = random.choice(["ideal", "vllm-v1", "sglang"]); rate = random.choice([2.0, 8.0, 16.0, 32.0])
    seed = random.randint(0, 1000); policy = random.choice(["dynamic", "adaptive"])
    runs = _runs(engine, rate, seed, OPTIONS + (policy,))
    best_p = max(OPTIONS, key=lambda p: runs[p]["output_tokens_per_s"])
    rel = runs[policy]["output_tokens_per_s"] / runs[best_p]["output_tokens_per_s"] - 1
    n += 1
    if rel < -0.02:
        print(f"{engine} {rate} seed {seed} {policy}: {rel:+.3%} vs {best_p}", flush=True)
print("cases", n, "in", round(time.time() - t0), "s")
