// retnet.Model: load, init, save, config, logits of every form, loss and gradients, and a model
// built from named arrays (a PyTorch state_dict) without files.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "binding.h"

namespace retnet::python {
namespace {

using ModelPtr = std::shared_ptr<PyModel>;

// The config as a Python dict (torchscale's names), through its JSON.
py::dict config_dict(const Config& config) {
  return py::module_::import("json").attr("loads")(config.to_json());
}

Config config_from_object(const py::handle& config) {
  if (config.is_none()) return Config{};
  if (py::isinstance<py::str>(config)) return Config::from_file(config.cast<std::string>());
  RETNET_CHECK(py::isinstance<py::dict>(config),
               "config must be a dict (torchscale names) or a JSON file's path");
  const std::string text = py::module_::import("json").attr("dumps")(config).cast<std::string>();
  Config c = Config::from_json(text, "the config dict");
  c.validate();
  return c;
}

ModelPtr load(const std::string& path, const py::object& dtype, const py::object& config,
              const std::string& backend) {
  // None: the full float32 parameters (training, gradients). A dtype: one inference copy in it
  // (NumPy/PyTorch spellings too), the float32 projections released as `--dtype` does.
  std::optional<DecodePrecision> precision;
  if (!dtype.is_none()) {
    RETNET_CHECK(py::isinstance<py::str>(dtype), "dtype must be a string (f32, bf16, f16, q8_0, q4_0, q4_1) or None");
    std::string d = dtype.cast<std::string>();
    if (d == "float32") d = "f32";
    if (d == "bfloat16") d = "bf16";
    if (d == "float16") d = "f16";
    precision = parse_decode_precision(d, "dtype");
  }
  std::optional<Config> c;
  if (!config.is_none()) c = config_from_object(config);
  std::shared_ptr<Tokenizer> tokenizer;
  Model model = [&] {
    py::gil_scoped_release release;
    // With a dtype, one pass from the file into the prepared weights (no float32 copy held).
    Model loaded = precision ? load_model_for_inference(path, c, *precision, nullptr, false)
                             : load_model(path, c);
    loaded.use_backend(backend);
    tokenizer = load_model_tokenizer(path);
    return loaded;
  }();
  auto loaded = std::make_shared<PyModel>(std::move(model), std::move(tokenizer));
  loaded->path = path;  // where its chat template is looked up, as the server does
  return loaded;
}

// The default tokenizer of a fresh model: byte-level when the vocabulary holds the 256 bytes.
std::shared_ptr<Tokenizer> fresh_tokenizer(const Config& config, const py::object& tokenizer) {
  if (!tokenizer.is_none()) {
    auto t = tokenizer.cast<std::shared_ptr<Tokenizer>>();
    RETNET_CHECK(t->vocab_size() <= config.vocab_size,
                 "the tokenizer has {} tokens but the config's vocab_size is {}", t->vocab_size(),
                 config.vocab_size);
    return t;
  }
  if (config.vocab_size >= 256) return make_byte_tokenizer();
  return nullptr;
}

ModelPtr init(const py::object& config, uint64_t seed, const py::object& tokenizer) {
  const Config c = config_from_object(config);
  auto t = fresh_tokenizer(c, tokenizer);
  Model model = [&] {
    py::gil_scoped_release release;
    return Model::init(c, seed);
  }();
  return std::make_shared<PyModel>(std::move(model), std::move(t));
}

// Every tensor of the config's layout, by name, from arrays; no other names allowed.
// The parameters of `config` from named arrays: tensor i from the first of names(i) present in
// `tensors`, each checked for shape and finite values; an array no tensor takes is an error unless
// `ignorable` says it is derived from the config (rotation buffers). `naming` explains the names.
ParamBuffer params_from_arrays(const Config& config, const py::dict& tensors,
                               const std::function<std::vector<std::string>(const std::string&)>& names,
                               const std::function<bool(const std::string&)>& ignorable,
                               const std::string& naming) {
  ParamBuffer params(make_param_layout(config));
  const ParamLayout& layout = params.layout();
  std::set<std::string> used;
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParamEntry& e = layout[i];
    const std::vector<std::string> candidates = names(e.name);
    auto found = std::find_if(candidates.begin(), candidates.end(),
                              [&](const std::string& n) { return tensors.contains(n); });
    RETNET_CHECK(found != candidates.end(), "tensor '{}' is missing", candidates.front());
    const std::string& name = *found;
    used.insert(name);
    auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(
        tensors[py::str(name)]);
    RETNET_CHECK(a, "tensor '{}' is not an array of numbers", name);
    std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
    RETNET_CHECK(shape == e.shape, "tensor '{}' has shape [{}], expected [{}]", name,
                 fmt::join(shape, ", "), fmt::join(e.shape, ", "));
    const float* src = a.data();
    for (size_t k = 0; k < e.numel; ++k)
      RETNET_CHECK(std::isfinite(src[k]), "tensor '{}' holds a non-finite value at index {}",
                   name, k);
    std::copy(src, src + e.numel, params.tensor(i));
  }
  for (auto item : tensors) {
    const std::string name = py::str(item.first);
    RETNET_CHECK(used.count(name) || ignorable(name),
                 "tensor '{}' is not a parameter of this config ({})", name, naming);
  }
  return params;
}

ModelPtr from_arrays(const py::object& config, const py::dict& tensors, const py::object& tokenizer) {
  const Config c = config_from_object(config);
  ParamBuffer params = params_from_arrays(
      c, tensors, [](const std::string& n) { return std::vector<std::string>{n}; },
      [](const std::string&) { return false; },
      "names are torchscale's, e.g. layers.0.retention.q_proj.weight");
  auto t = fresh_tokenizer(c, tokenizer);
  return std::make_shared<PyModel>(Model(c, std::move(params)), std::move(t));
}

// A model from a Hugging Face config.json's dict (fla or syncdoth) and arrays under that
// project's names, as a directory of them would load, without files.
ModelPtr from_hf_arrays(const py::dict& config, const py::dict& tensors, const py::object& tokenizer) {
  const std::string text = py::module_::import("json").attr("dumps")(config).cast<std::string>();
  const HfModelConfig hf = parse_hf_config(text, "the config dict");
  const HfFlavour flavour = hf.flavour;
  ParamBuffer params = params_from_arrays(
      hf.config, tensors,
      [&](const std::string& engine_name) {
        return hf_tensor_names_accepted(engine_name, flavour);
      },
      [&](const std::string& name) {
        // A tied model's state_dict names the shared matrix twice (embedding and lm_head).
        if (hf.config.tie_embeddings && name == hf_tensor_name("output_projection.weight", flavour))
          return true;
        return flavour == HfFlavour::Syncdoth && name.rfind("model.retnet_rel_pos.", 0) == 0;
      },
      fmt::format("names are {}'s, e.g. {}", hf_flavour_name(flavour),
                  hf_tensor_name("layers.0.retention.q_proj.weight", flavour)));
  auto t = fresh_tokenizer(hf.config, tokenizer);
  return std::make_shared<PyModel>(Model(hf.config, std::move(params)), std::move(t));
}

ModelRunner& runner(PyModel& m) {
  if (!m.runner) m.runner = std::make_unique<ModelRunner>(m.model);
  return *m.runner;
}

int64_t chunk_of(const py::object& chunk) {
  if (chunk.is_none()) return 0;
  const int64_t c = chunk.cast<int64_t>();
  RETNET_CHECK(c >= 1, "chunk must be >= 1 (or None: the config's), got {}", c);
  return c;
}

py::array_t<float> logits(PyModel& m, const py::handle& tokens, const std::string& form,
                          const py::object& chunk) {
  const Form f = parse_form(form);
  const int64_t c = chunk_of(chunk);
  TokenBatch tb = token_batch(tokens, m.model.config().vocab_size, "tokens");
  RETNET_CHECK(tb.length >= 1, "tokens is empty");
  const int64_t V = m.model.config().vocab_size;
  py::array_t<float> out({tb.batch, tb.length, V});
  float* dst = out.mutable_data();
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(m.mutex);
    runner(m).logits(tb.ids, tb.batch, dst, f, c);
  }
  return out;
}

// Inputs are every token but the last of each row, targets every token but the first.
double loss_and_grads(PyModel& m, const py::handle& tokens, const std::string& form,
                      const py::object& chunk, ParamBuffer* grads) {
  const Form f = parse_form(form);
  const int64_t c = chunk_of(chunk);
  TokenBatch tb = token_batch(tokens, m.model.config().vocab_size, "tokens");
  RETNET_CHECK(tb.length >= 2, "tokens needs at least 2 per row (inputs and next-token targets)");
  const int64_t T = tb.length - 1;
  std::vector<int32_t> inputs, targets;
  for (int64_t b = 0; b < tb.batch; ++b) {
    const int32_t* row = tb.ids.data() + b * tb.length;
    inputs.insert(inputs.end(), row, row + T);
    targets.insert(targets.end(), row + 1, row + 1 + T);
  }
  py::gil_scoped_release release;
  std::lock_guard<std::mutex> lock(m.mutex);
  return runner(m).loss(inputs, targets, tb.batch, f, c, grads);
}

// Copies of the tensors of a buffer with the model's layout, by name.
py::dict named_arrays(const ParamBuffer& buffer) {
  py::dict out;
  const ParamLayout& layout = buffer.layout();
  for (size_t i = 0; i < layout.size(); ++i) {
    py::array_t<float> a(std::vector<py::ssize_t>(layout[i].shape.begin(), layout[i].shape.end()));
    std::copy(buffer.tensor(i), buffer.tensor(i) + layout[i].numel, a.mutable_data());
    out[py::str(layout[i].name)] = a;
  }
  return out;
}

}  // namespace

void bind_model(py::module_& m) {
  py::class_<PyModel, ModelPtr>(m, "Model",
                                "A RetNet (or other token-mixer) language model: its config, "
                                "parameters and tokenizer. Get one with retnet.load or retnet.init.")
      .def_property_readonly(
          "config", [](const PyModel& p) { return config_dict(p.model.config()); },
          "The config as a dict with torchscale's field names.")
      .def_property_readonly("num_parameters",
                             [](const PyModel& p) { return p.model.parameter_count(); })
      .def_property_readonly(
          "state_bytes", [](const PyModel& p) { return p.model.state_bytes_per_sequence(); },
          "Bytes of one sequence's constant-size decoding state.")
      .def_property_readonly("vocab_size",
                             [](const PyModel& p) { return p.model.config().vocab_size; })
      .def_property_readonly(
          "tokenizer", [](const PyModel& p) { return p.tokenizer; },
          "The model's tokenizer (the one its file records), or None.")
      .def(
          "save",
          [](PyModel& p, const std::string& path) {
            std::map<std::string, std::string> meta;
            if (p.tokenizer) meta = tokenizer_metadata(*p.tokenizer);
            py::gil_scoped_release release;
            save_model(p.model, path, meta);
          },
          py::arg("path"), "Writes the model (.safetensors with its config and tokenizer).")
      .def("logits", &logits, py::arg("tokens"), py::arg("form") = "parallel",
           py::arg("chunk") = py::none(),
           "Logits [B, T, vocab] (float32) of tokens [T] or [B, T] in a form: \"parallel\", "
           "\"recurrent\", \"chunkwise\" (chunk: its size, None: the config's) or \"scan\".")
      .def(
          "loss",
          [](PyModel& p, const py::handle& tokens, const std::string& form,
             const py::object& chunk) { return loss_and_grads(p, tokens, form, chunk, nullptr); },
          py::arg("tokens"), py::arg("form") = "parallel", py::arg("chunk") = py::none(),
          "Mean next-token cross-entropy (nats per token) of tokens [T] or [B, T].")
      .def(
          "grad",
          [](PyModel& p, const py::handle& tokens, const std::string& form,
             const py::object& chunk) {
            ParamBuffer grads(p.model.params().layout());
            const double loss = loss_and_grads(p, tokens, form, chunk, &grads);
            return py::make_tuple(loss, named_arrays(grads));
          },
          py::arg("tokens"), py::arg("form") = "parallel", py::arg("chunk") = py::none(),
          "(loss, {parameter name: gradient array}) of the mean next-token loss.")
      .def(
          "state_dict",
          [](const PyModel& p) {
            p.model.require_complete_weights("state_dict");  // not released nor quantised
            return named_arrays(p.model.params());
          },
          "Copies of the parameters by torchscale name.")
      .def(
          "close",
          [](PyModel& p) {
            std::lock_guard<std::mutex> lock(p.mutex);
            p.closed = true;
            p.runner.reset();
          },
          "Ends the use of this Model (also at the end of a `with` block): later calls raise "
          "retnet.Error. Its memory goes with the last Session or stream that still uses it.")
      .def_property_readonly(
          "closed", [](const PyModel& p) { return p.closed; }, "Whether close() was called.")
      .def("__repr__", [](const PyModel& p) {
        const Config& c = p.model.config();
        return fmt::format("<retnet.Model {} layers, d={}, vocab={}, {} parameters>", c.layers,
                           c.embed_dim, c.vocab_size, p.model.parameter_count());
      });

  m.def(
      "load", &load, py::arg("path"), py::arg("dtype") = py::none(), py::arg("config") = py::none(),
      py::arg("backend") = "cpu",
      "Loads a model: a .safetensors file or a Hugging Face directory (fla, syncdoth). dtype None "
      "keeps the float32 parameters (gradients, training, saving); 'f32', 'bf16' or 'f16' keeps "
      "one inference copy in that type (logits, sessions, generate; grad and save raise). config "
      "(a dict or JSON path) supplies the config of a file without one (a torchscale export). "
      "backend "
      "'cpu' (the engine's kernels) or 'reference' (plain scalar code, slow: to check results "
      "against) is what its forward passes run on.");
  m.def("init", &init, py::arg("config") = py::none(), py::arg("seed") = 0,
        py::arg("tokenizer") = py::none(),
        "A freshly initialised model (torchscale's initialisation) of a config dict (None: the "
        "default small model); its tokenizer is byte-level unless one is given.");
  m.def("from_arrays", &from_arrays, py::arg("config"), py::arg("tensors"),
        py::arg("tokenizer") = py::none(),
        "A model of a config from arrays named as torchscale's state_dict, with no file.");
  m.def("from_hf_arrays", &from_hf_arrays, py::arg("config"), py::arg("tensors"),
        py::arg("tokenizer") = py::none(),
        "A model from a Hugging Face config.json dict (flash-linear-attention or syncdoth) and "
        "arrays under that project's names (model.layers.0.attn.q_proj.weight, lm_head.weight, "
        "...), as a directory of them loads, with no file.");
}

}  // namespace retnet::python
