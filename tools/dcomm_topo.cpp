// dcomm-topo: how this host's GPUs and NICs connect, as `nvidia-smi topo -m` prints it, and
// the topology as JSON (the format DCOMM_TOPO_FILE reads).
//
//   dcomm-topo            the matrix
//   dcomm-topo -j [file]  JSON to stdout or to file
// DCOMM_TOPO_FILE=f shows f's topology instead of this host's; DCOMM_TOPO_DUMP_FILE=f also
// writes what was shown to f.
#include <cstdio>
#include <fstream>
#include <string>

#include <dcomm/topo/topology.hpp>

#include "cli.hpp"

int main(int argc, char** argv) {
  bool json = false;
  std::string file;
  dcomm_cli::Cli("dcomm-topo", "[-j [file.json]]",
                 "How this host's GPUs and NICs connect, as `nvidia-smi topo -m` prints it, or the topology as JSON\n"
                 "(the format DCOMM_TOPO_FILE reads).")
      .flag("-j", "[file.json]", "JSON instead of the matrix, to stdout or to file.json",
            [&](const std::string& v) -> std::string {
              json = true;
              file = v;
              return "";
            })
      .epilog(
          "DCOMM_TOPO_FILE=f shows f's topology instead of this host's; DCOMM_TOPO_DUMP_FILE=f also writes\n"
          "what was shown to f.")
      .parse(argc, argv);
  auto t = dcomm::load_topology();
  if (!t.ok()) {
    std::fprintf(stderr, "dcomm-topo: %s\n", t.status().message().c_str());
    return 1;
  }
  if (!json) {
    std::fputs(t->matrix().c_str(), stdout);
    return 0;
  }
  if (file.empty()) {
    std::fputs(t->to_json().c_str(), stdout);
    return 0;
  }
  std::ofstream out(file);
  if (!(out << t->to_json())) {
    std::fprintf(stderr, "dcomm-topo: cannot write %s\n", file.c_str());
    return 1;
  }
  return 0;
}
