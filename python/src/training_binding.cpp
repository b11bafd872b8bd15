// retnet._train: `retnet train` as a call (the same trainer), with a metrics callback that may
// stop the run early (a checkpoint is written, as on Ctrl-C).
#include "binding.h"

namespace retnet::python {
namespace {

// Options by the CLI's names (dashes as underscores): every key must be known.
void apply_option(TrainOptions& o, const std::string& key, const py::handle& v) {
  auto i64 = [&] { return v.cast<int64_t>(); };
  auto f64 = [&] { return v.cast<double>(); };
  if (key == "tokenizer") o.tokenizer = v.cast<std::string>();
  else if (key == "token_cache_dir") o.token_cache_dir = v.cast<std::string>();
  else if (key == "init_from") o.init_from = v.cast<std::string>();
  else if (key == "batch") o.batch = i64();
  else if (key == "seq") o.seq = i64();
  else if (key == "grad_accum") o.grad_accum = i64();
  else if (key == "lr") o.optimizer.lr = f64();
  else if (key == "warmup") o.optimizer.warmup_steps = i64();
  else if (key == "weight_decay") o.optimizer.weight_decay = f64();
  else if (key == "clip") o.optimizer.clip_norm = f64();
  else if (key == "form") o.form = parse_form(v.cast<std::string>());
  else if (key == "chunk") o.chunk = i64();
  else if (key == "seed") o.seed = v.cast<uint64_t>();
  else if (key == "resume") o.resume = v.cast<bool>();
  else if (key == "overwrite") o.overwrite = v.cast<bool>();
  else if (key == "log_interval") o.log_interval = i64();
  else if (key == "eval_interval") o.eval_interval = i64();
  else if (key == "checkpoint_interval") o.checkpoint_interval = i64();
  else if (key == "eval_tokens") o.eval_tokens = i64();
  else if (key == "keep") o.keep_checkpoints = static_cast<int>(i64());
  else if (key == "quiet") o.quiet = v.cast<bool>();
  else
    throw Error(fmt::format(
        "unknown training option '{}' (known: tokenizer, token_cache_dir, init_from, batch, seq, "
        "grad_accum, lr, warmup, weight_decay, clip, form, chunk, seed, resume, overwrite, "
        "log_interval, eval_interval, checkpoint_interval, eval_tokens, keep, quiet)",
        key));
}

py::dict train_call(const std::string& data, const std::string& config_path,
                    const std::string& out, const py::object& steps,
                    const py::object& time_budget, const py::object& callback,
                    const py::dict& options) {
  TrainOptions o;
  o.data = data;
  o.config_path = config_path;
  o.out_dir = out;
  o.spelling = OptionSpelling::Python;
  if (!steps.is_none()) o.steps = steps.cast<int64_t>();
  if (!time_budget.is_none()) o.time_budget_s = time_budget.cast<double>();
  RETNET_CHECK(o.steps >= 0 && o.time_budget_s >= 0, "steps and time_budget must be >= 0");
  RETNET_CHECK(o.steps > 0 || o.time_budget_s > 0, "give steps or time_budget (or both)");
  for (auto item : options) apply_option(o, py::str(item.first), item.second);
  bool stopped_by_callback = false;
  if (!callback.is_none()) {
    // Runs on this thread with the GIL retaken; an exception it raises ends the run.
    o.on_metrics = [&callback, &stopped_by_callback](const std::map<std::string, double>& m) {
      py::gil_scoped_acquire gil;
      py::dict figures;
      for (const auto& [key, value] : m)
        figures[py::str(key)] = key == "step" || key == "val_tokens"
                                    ? py::object(py::int_(static_cast<int64_t>(value)))
                                    : py::object(py::float_(value));
      const py::object answer = callback(figures);
      const bool go_on = !(answer.ptr() == Py_False);
      if (!go_on) stopped_by_callback = true;
      return go_on;
    };
  }
  TrainResult r;
  {
    py::gil_scoped_release release;
    r = train(o);
  }
  py::dict result;
  result["steps"] = r.steps;
  result["train_loss"] = r.final_train_loss;
  result["val_loss"] = r.final_val_loss;
  result["val_bits_per_byte"] = r.val_bits_per_byte;
  result["tokens_per_s"] = r.tokens_per_s;
  result["interrupted"] = r.interrupted;
  result["stopped_by_callback"] = stopped_by_callback;
  return result;
}

}  // namespace

void bind_training(py::module_& m) {
  m.def("_train", &train_call, py::arg("data"), py::arg("config_path"), py::arg("out"),
        py::arg("steps"), py::arg("time_budget"), py::arg("callback"), py::arg("options"),
        "The trainer of `retnet train` (use retnet.train).");
}

}  // namespace retnet::python
