// dcomm-topo: how this host's GPUs and NICs connect, as `nvidia-smi topo -m` prints it, and
// the topology as JSON (the format DCOMM_TOPO_FILE reads).
//
//   dcomm-topo            the matrix
//   dcomm-topo -j [file]  JSON to stdout or to file
// DCOMM_TOPO_FILE=f shows f's topology instead of this host's; DCOMM_TOPO_DUMP_FILE=f also
// writes what was shown to f.
#include <cstdio>
#include <cstring>
#include <fstream>

#include <dcomm/topo/topology.hpp>

int main(int argc, char** argv) {
  auto t = dcomm::load_topology();
  if (!t.ok()) {
    std::fprintf(stderr, "dcomm-topo: %s\n", t.status().message().c_str());
    return 1;
  }
  if (argc > 1 && std::strcmp(argv[1], "-j") == 0) {
    if (argc > 2) {
      std::ofstream out(argv[2]);
      if (!(out << t->to_json())) {
        std::fprintf(stderr, "dcomm-topo: cannot write %s\n", argv[2]);
        return 1;
      }
    } else {
      std::fputs(t->to_json().c_str(), stdout);
    }
    return 0;
  }
  if (argc > 1) {
    std::fprintf(stderr, "usage: dcomm-topo [-j [file.json]]\n");
    return 2;
  }
  std::fputs(t->matrix().c_str(), stdout);
  return 0;
}
