"""One rank of harness.run_ranks(backend="mpi"), started by mpiexec: imports the test module, runs
fn(rank, world, *args) and writes ["ok", result] or ["error", traceback] to OUT/rank{r}.json."""
import importlib.util
import json
import os
import sys
import traceback


def main() -> None:
    spec = json.loads(sys.argv[1])
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.dirname(spec["module"]), here, os.path.dirname(here)]   # harness, ports
    from tg import config
    rank = max(config.OMPI_COMM_WORLD_RANK, config.PMI_RANK, 0)
    world = max(config.OMPI_COMM_WORLD_SIZE, config.PMI_SIZE, 1)
    try:
        import tg.distributed as dist
        module_spec = importlib.util.spec_from_file_location("tg_test_module", spec["module"])
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        if spec["init"]:
            dist.init_process_group(timeout=spec["dist_timeout"])
        result = ["ok", getattr(module, spec["fn"])(rank, world, *spec["args"])]
        if spec["init"]:
            dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - report everything to the parent
        result = ["error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"]
    path = os.path.join(spec["out"], f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
