#!/usr/bin/env python3
"""Regenerates golden.json: small mooncake traces replayed by the reference dynamo.replay
(ai-dynamo 1.4.2). Run from any scratch directory:
    python3 gen_golden.py OUT_JSON
Needs the reference at ~/.cache/dynosim-reference. Times are stored as repr() strings (exact),
hash ids as runs [first, count]."""
import json, random, subprocess, sys, math, os
scen = []
def S(name, engine, reqs, tbs=512):
    scen.append(dict(name=name, engine=engine, tbs=tbs, requests=reqs))
def R(t, isl, osl, hids):
    return dict(t=t, isl=isl, osl=osl, hash_ids=hids)
def hids_for(isl, base, tbs=512):
    return [base + i for i in range(math.ceil(isl / tbs))]
# 1 singles
S("singles_vllm_defaults", {"block_size":64,"num_gpu_blocks":16384},
  [R(i*20000, isl, 3, hids_for(isl, 1000*(i+1))) for i,isl in enumerate([128,1000,1024,4096,16384])])
S("singles_trtllm_defaults", {"engine_type":"trtllm","block_size":32,"num_gpu_blocks":16384},
  [R(i*20000, isl, 3, hids_for(isl, 1000*(i+1))) for i,isl in enumerate([1000,1024])] + [R(40000, 1024, 2, hids_for(1024,2000))])
S("repeat_1024_and_1000", {"block_size":64,"num_gpu_blocks":16384},
  [R(0,1024,2,[1,2]), R(1000,1024,2,[1,2]), R(2000,1000,2,[5,6]), R(3000,1001,2,[5,6])])
S("same_pass_reuse", {"block_size":64,"num_gpu_blocks":16384},
  [R(0,1024,2,[1,2]), R(0,1500,2,[1,2,3])])
S("pair_1000_hit_960", {"block_size":64,"num_gpu_blocks":16384},
  [R(0,1000,2,[1,2]), R(1000,1000,2,[1,2]), R(1000,999,2,[7,8])])
S("tbs512_600_700", {"block_size":64,"num_gpu_blocks":16384},
  [R(0,600,2,[1,2]), R(1000,700,2,[1,2])])
S("preempt_lifo", {"block_size":16,"num_gpu_blocks":40},
  [R(0,200,200,[1]), R(0,201,200,[2]), R(0,202,200,[3])])
S("preempt_fifo", {"block_size":16,"num_gpu_blocks":40,"preemption_mode":"fifo"},
  [R(0,200,200,[1]), R(0,201,200,[2]), R(0,202,200,[3])])
S("trtllm_no_evict_4x", {"engine_type":"trtllm","block_size":32,"num_gpu_blocks":100},
  [R(0,500+i,1000,[10+i]) for i in range(4)])
S("trtllm_clamp_and_reject", {"engine_type":"trtllm","block_size":32,"num_gpu_blocks":100},
  [R(0,500,5000,[1]), R(0,3300,10,[2,3,4,5,6,7,8]), R(10,3200,0,[20,21,22,23,24,25,26]), R(20, 100, 5, [30])])
S("vllm_reject_model_len_and_pool", {"block_size":16,"num_gpu_blocks":50,"max_model_len":700},
  [R(0,300,500,[1]), R(0,800,10,[2,3]), R(0,650,100,[4,5]), R(5,100,0,[6])])
S("vllm_reject_pool", {"block_size":16,"num_gpu_blocks":50},
  [R(0,801,10,[2,3]), R(0,300,5,[4])])
S("osl_zero", {"block_size":64,"num_gpu_blocks":16384},
  [R(0,1024,0,[1,2]), R(0,1000,4,[3,4]), R(100,1024,0,[1,2])])
S("no_chunked_prefill", {"block_size":32,"num_gpu_blocks":2000,"enable_chunked_prefill":False,"max_num_batched_tokens":3000},
  [R(0,2000,5,[1,2,3,4]), R(0,1500,5,[5,6,7]), R(0,900,5,[8,9]), R(3,2999,4,[10,11,12,13,14,15])])
S("chunked_small_budget_seqs", {"block_size":32,"num_gpu_blocks":2000,"max_num_batched_tokens":1000,"max_num_seqs":2},
  [R(0,2500,6,[1,2,3,4,5]), R(0,1500,5,[5,6,7]), R(1,900,5,[8,9]), R(2,50,20,[10])])
S("speedup", {"block_size":64,"num_gpu_blocks":16384,"speedup_ratio":3.0,"decode_speedup_ratio":1.7},
  [R(0,3000,5,[1,2,3,4,5,6]), R(1,77,5,[9])])
S("speedup_zero", {"block_size":64,"num_gpu_blocks":16384,"speedup_ratio":0.0},
  [R(0,3000,5,[1,2,3,4,5,6])])
S("no_prefix_caching", {"block_size":16,"num_gpu_blocks":200,"enable_prefix_caching":False},
  [R(0,1000,30,[1,2]), R(0,999,30,[1,2]), R(50,1001,30,[1,2])])

def rand_scen(name, seed, engine, n, rate_ms, tbs, isl_rng, osl_rng, nprefix=6):
    rng = random.Random(seed)
    t = 0.0
    reqs = []
    used = set()
    prefixes = [[seed*100000 + p*1000 + j for j in range(rng.randint(1,6))] for p in range(nprefix)]
    nxt = seed*100000 + 90000
    for i in range(n):
        t += rng.expovariate(1.0/rate_ms)
        while True:
            isl = rng.randint(*isl_rng)
            if isl not in used: break
        used.add(isl)
        nb = math.ceil(isl/tbs)
        if rng.random() < 0.75:
            p = rng.choice(prefixes)
            h = p[:nb]
        else:
            h = []
        while len(h) < nb:
            h.append(nxt); nxt += 1
        osl = rng.randint(*osl_rng)
        reqs.append(R(int(t), isl, osl, h))
    S(name, engine, reqs, tbs)

rand_scen("rand_lifo_bs16", 1, {"block_size":16,"num_gpu_blocks":400,"max_num_batched_tokens":2048}, 70, 40, 32, (50,1500), (1,120))
rand_scen("rand_fifo_bs32", 2, {"block_size":32,"num_gpu_blocks":300,"max_num_batched_tokens":2048,"preemption_mode":"fifo"}, 70, 30, 32, (50,1800), (1,150))
rand_scen("rand_lifo_bs64_8192", 3, {"block_size":64,"num_gpu_blocks":250}, 80, 20, 64, (100,3000), (1,200))
rand_scen("rand_seqs_nochunk", 4, {"block_size":16,"num_gpu_blocks":800,"max_num_batched_tokens":4096,"enable_chunked_prefill":False,"max_num_seqs":8}, 60, 25, 32, (50,2000), (0,100))
rand_scen("rand_model_len", 5, {"block_size":32,"num_gpu_blocks":500,"max_model_len":1600,"max_num_batched_tokens":1024}, 60, 30, 32, (50,1900), (1,300))
rand_scen("rand_trtllm", 6, {"engine_type":"trtllm","block_size":32,"num_gpu_blocks":400,"max_num_batched_tokens":2048}, 60, 30, 32, (50,2000), (1,400))
rand_scen("rand_unlimited", 7, {"block_size":16,"num_gpu_blocks":600,"max_num_batched_tokens":None,"max_num_seqs":None}, 60, 15, 32, (50,1500), (1,100))
rand_scen("heavy_lifo", 11, {"block_size":16,"num_gpu_blocks":150,"max_num_batched_tokens":512}, 80, 10, 32, (30,900), (50,400))
rand_scen("heavy_fifo", 12, {"block_size":16,"num_gpu_blocks":150,"max_num_batched_tokens":512,"preemption_mode":"fifo"}, 80, 10, 32, (30,900), (50,400))
rand_scen("heavy_fifo_unlimited", 13, {"block_size":32,"num_gpu_blocks":90,"max_num_batched_tokens":None,"preemption_mode":"fifo","max_num_seqs":None}, 70, 5, 32, (30,1200), (20,500))
rand_scen("heavy_nochunk", 14, {"block_size":16,"num_gpu_blocks":200,"max_num_batched_tokens":1500,"enable_chunked_prefill":False}, 70, 8, 32, (30,1400), (20,300))
rand_scen("heavy_trtllm", 15, {"engine_type":"trtllm","block_size":16,"num_gpu_blocks":150,"max_num_batched_tokens":512}, 70, 10, 32, (30,900), (50,400))
rand_scen("heavy_nocache", 16, {"block_size":16,"num_gpu_blocks":150,"enable_prefix_caching":False,"preemption_mode":"fifo"}, 70, 10, 32, (30,900), (50,400))
rand_scen("rand_bs7", 8, {"block_size":7,"num_gpu_blocks":900,"max_num_batched_tokens":700,"preemption_mode":"fifo"}, 50, 20, 32, (20,900), (1,100))

out = []
os.makedirs("scen", exist_ok=True)
for s in scen:
    fn = f"scen/{s['name']}.jsonl"
    with open(fn, "w") as f:
        for r in s["requests"]:
            f.write(json.dumps({"timestamp": r["t"], "input_length": r["isl"], "output_length": r["osl"], "hash_ids": r["hash_ids"]}) + "\n")
    cmd = [os.path.expanduser("~/.cache/dynosim-reference/bin/python"), "-m", "dynamo.replay", fn, "--extra-engine-args", json.dumps(s["engine"]),
           "--trace-block-size", str(s["tbs"]), "--report-json", f"scen/{s['name']}.json", "--report-jsonl", f"scen/{s['name']}.out.jsonl"]
    env = dict(os.environ, DYN_LOG="error")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        print("FAIL", s["name"], p.stderr[-500:]); continue
    rows = [json.loads(l) for l in open(f"scen/{s['name']}.out.jsonl")]
    t0 = min(r["t"] for r in s["requests"])
    by = {}
    for r in rows:
        key = (round(r["arrival_time_ms"], 6), r["input_length"])
        assert key not in by, (s["name"], key)
        by[key] = r
    exp = []
    for r in s["requests"]:
        row = by[(round(float(r["t"] - t0), 6), r["isl"])]
        exp.append(dict(admit=row["first_admit_ms"], first=row["first_token_ms"], end=row["terminal_time_ms"],
                        reused=row["reused_input_tokens"], out=row["output_length"], status=row["terminal_status"]))
    s["expected"] = exp
    out.append(s)
    print(s["name"], len(rows))
for s in out:
    for r in s["requests"]:
        runs = []
        for h in r["hash_ids"]:
            if runs and runs[-1][0] + runs[-1][1] == h:
                runs[-1][1] += 1
            else:
                runs.append([h, 1])
        r["hash_runs"] = runs
        del r["hash_ids"]
    for e in s["expected"]:
        for k in ("admit", "first", "end"):
            if e[k] is not None:
                e[k] = repr(float(e[k]))
json.dump(out, open(sys.argv[1] if len(sys.argv) > 1 else "golden.json", "w"), separators=(",", ":"))
