// `retnet`: the command-line front end. Every subcommand has --help; errors go to stderr with a
// non-zero exit status.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>

#include "commands.h"
#include "retnet/core/cpu_isa.h"
#include "retnet/core/isa_kernels.h"
#include "retnet/core/thread_policy.h"
#include "retnet/retnet.h"

int main(int argc, char** argv) {
  retnet::apply_thread_policy();  // may restart the process: first, before any work
  CLI::App app{"retnet: retentive networks (RetNet) in C++: parallel, recurrent, chunkwise and "
               "scan forms over one set of weights"};
  // Built when asked: after the RETNET_MAX_ISA check below, which the kernel choice reads.
  app.set_version_flag("--version", [] {
    std::string backends;
    for (const std::string& name : retnet::backend_names())
      backends += (backends.empty() ? "" : ", ") + name;
    return "retnet 0.1.0\nOpenMP waits: " + retnet::thread_policy() +
           "\nKernels: " + retnet::kernel_summary() + "\nBackends: " + backends;
  });
  app.require_subcommand(1);
  retnet::cli::register_init(app);
  retnet::cli::register_info(app);
  retnet::cli::register_export(app);
  retnet::cli::register_quantize(app);
  retnet::cli::register_logits(app);
  retnet::cli::register_demo(app);
  retnet::cli::register_grad(app);
  retnet::cli::register_train(app);
  retnet::cli::register_eval(app);
  retnet::cli::register_tokenizer(app);
  retnet::cli::register_chat_template(app);
  retnet::cli::register_generate(app);
  retnet::cli::register_bench(app);
  retnet::cli::register_serve(app);
  try {
    retnet::isa_cap();  // a bad RETNET_MAX_ISA fails every command, not only those reaching a kernel
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // Bad arguments read like every other error: one "retnet: error:" line, a non-zero exit.
    std::fprintf(stderr, "retnet: error: %s\nRun with --help for more information.\n", e.what());
    return e.get_exit_code();
  } catch (const retnet::Error& e) {
    std::fprintf(stderr, "retnet: error: %s\n", e.what());
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A file-system condition (permission, symbolic-link loop, name too long) is the user's to
    // fix, not a bug: name the path and the reason.
    const std::string second = e.path2().empty() ? "" : " and '" + e.path2().string() + "'";
    if (e.path1().empty())
      std::fprintf(stderr, "retnet: error: %s\n", e.what());
    else
      std::fprintf(stderr, "retnet: error: cannot access '%s'%s: %s\n", e.path1().c_str(),
                   second.c_str(), e.code().message().c_str());
    return 1;
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "retnet: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "retnet: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "retnet: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
