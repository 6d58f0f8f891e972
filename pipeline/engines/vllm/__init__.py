"""vLLM's room: its serving env and CUDA builds (serving_env, cuda_builds), the server and its
start-up (server, startup_phases, engine_facts, engine_memory), `vllm bench serve` (bench), the
engines eval and serve size and place (sizing, engine_plan, placement), the eval backend
(eval_backend, engine_identity). The scripts run in its env are pipeline/vllm_scripts/."""
