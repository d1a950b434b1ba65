#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>

#include <cstdlib>
#include <initializer_list>
#include <string>

#include <dcomm/bootstrap/launcher.hpp>

using namespace dcomm;

namespace {
// Sets the given variables for one test and clears every launcher variable before and after.
struct EnvScope {
  static constexpr const char* kAll[] = {"DCOMM_RANK",
                                         "DCOMM_WORLD_SIZE",
                                         "DCOMM_LOCAL_RANK",
                                         "DCOMM_UNIQUE_ID",
                                         "DCOMM_COMM_ID",
                                         "RANK",
                                         "WORLD_SIZE",
                                         "LOCAL_RANK",
                                         "MASTER_ADDR",
                                         "MASTER_PORT",
                                         "TORCHELASTIC_USE_AGENT_STORE",
                                         "OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                                         "OMPI_MCA_orte_hnp_uri",
                                         "PMIX_NAMESPACE",
                                         "OMPI_MCA_ess_base_jobid",
                                         "SLURM_PROCID",
                                         "SLURM_NTASKS",
                                         "SLURM_LOCALID",
                                         "SLURM_NNODES",
                                         "SLURM_JOB_NUM_NODES",
                                         "SLURM_JOB_ID",
                                         "SLURM_STEP_ID",
                                         "DCOMM_SECRET",
                                         "DCOMM_SECRET_FILE"};
  EnvScope(std::initializer_list<std::pair<const char*, std::string>> vars) {
    clear();
    for (auto& [k, v] : vars) setenv(k, v.c_str(), 1);
  }
  ~EnvScope() { clear(); }
  static void clear() {
    for (const char* k : kAll) unsetenv(k);
  }
};
}  // namespace

TEST_CASE("launcher: torchrun") {
  EnvScope env{
      {"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29500"}};
  auto li = detect_launch();
  REQUIRE(li.ok());
  CHECK(li->launcher == "torchrun");
  CHECK(li->rank == 3);
  CHECK(li->size == 4);
  CHECK(li->local_rank == 1);
  CHECK(li->rendezvous.host == "10.1.2.3");
  CHECK(li->rendezvous.port == 29500);
  CHECK_FALSE(li->host_store);
}

TEST_CASE("launcher: torchrun's agent store keeps MASTER_PORT, so dcomm takes the next port") {
  EnvScope env{{"RANK", "0"},
               {"WORLD_SIZE", "2"},
               {"MASTER_ADDR", "h"},
               {"MASTER_PORT", "29500"},
               {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  auto li = detect_launch();
  REQUIRE(li.ok());
  CHECK(li->rendezvous.port == 29501);
  CHECK(li->port_span > 1);  // the first free port from there: the agent's clients may hold one
  CHECK(li->host_store);
}

TEST_CASE("launcher: mpirun on one host derives the same address on every rank") {
  EnvScope env{{"OMPI_COMM_WORLD_RANK", "1"},
               {"OMPI_COMM_WORLD_SIZE", "2"},
               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
               {"OMPI_MCA_orte_hnp_uri", "123.0;tcp://1.2.3.4:5"}};
  auto a = detect_launch();
  REQUIRE(a.ok());
  CHECK(a->launcher == "mpirun");
  CHECK(a->rank == 1);
  CHECK(a->rendezvous.host == "127.0.0.1");
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  auto b = detect_launch();
  REQUIRE(b.ok());
  CHECK(b->rendezvous.port == a->rendezvous.port);
  CHECK(b->port_span > 1);  // a derived port may be taken: the first free one after it serves
  CHECK(b->host_store);
}

TEST_CASE("launcher: mpirun across hosts needs an address, and says so") {
  EnvScope env{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  auto li = detect_launch();
  REQUIRE_FALSE(li.ok());
  CHECK(li.status().message().find("DCOMM_COMM_ID") != std::string::npos);
  setenv("DCOMM_COMM_ID", "node-a:4000", 1);
  auto ok = detect_launch();
  REQUIRE(ok.ok());
  CHECK(ok->rendezvous.host == "node-a");
  CHECK(ok->rendezvous.port == 4000);
}

TEST_CASE("launcher: srun") {
  EnvScope env{{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"DCOMM_COMM_ID", "n0:7000"}};
  auto li = detect_launch();
  REQUIRE(li.ok());
  CHECK(li->launcher == "srun");
  CHECK(li->rank == 5);
  CHECK(li->size == 8);
  CHECK(li->local_rank == 1);
}

TEST_CASE("launcher: a unique id in the environment gives the rendezvous") {
  const std::string secret(64, 'a');
  EnvScope env{{"DCOMM_RANK", "0"},
               {"DCOMM_WORLD_SIZE", "2"},
               {"DCOMM_UNIQUE_ID", "dcomm2:00000000000000ff:" + secret + "@127.0.0.1:4242"}};
  auto li = detect_launch();
  REQUIRE(li.ok());
  CHECK(li->launcher == "dcomm");
  CHECK(li->nonce == 0xff);
  CHECK(li->rendezvous.port == 4242);
  CHECK_FALSE(li->host_store);
  CHECK(li->access.secret.set);  // the id's secret: always authenticated
  CHECK(li->access.secret.hex() == secret);
}

TEST_CASE("launcher: the job secret of a launcher start comes from DCOMM_SECRET or DCOMM_SECRET_FILE, else none") {
  {
    EnvScope env{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "4000"}};
    auto li = detect_launch();
    REQUIRE(li.ok());
    CHECK_FALSE(li->access.secret.set);
  }
  {
    EnvScope env{{"RANK", "1"},
                 {"WORLD_SIZE", "2"},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", "4000"},
                 {"DCOMM_SECRET", "correct horse battery staple"}};
    auto li = detect_launch();
    REQUIRE(li.ok());
    CHECK(li->access.secret.set);
    CHECK(li->access.secret.key == JobSecret::from_text("correct horse battery staple", "x")->key);
  }
  {
    const std::string file = "/tmp/dcomm-test-secret-" + std::to_string(getpid());
    { std::ofstream(file) << "from a file\n"; }
    EnvScope env{{"RANK", "1"},
                 {"WORLD_SIZE", "2"},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", "4000"},
                 {"DCOMM_SECRET_FILE", file}};
    auto li = detect_launch();
    std::remove(file.c_str());
    REQUIRE(li.ok());
    CHECK(li->access.secret.key == JobSecret::from_text("from a file", "x")->key);
  }
  {
    EnvScope env{{"RANK", "1"},
                 {"WORLD_SIZE", "2"},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", "4000"},
                 {"DCOMM_SECRET_FILE", "/nonexistent/secret"}};
    auto li = detect_launch();
    REQUIRE_FALSE(li.ok());
    CHECK(li.status().message().find("DCOMM_SECRET_FILE") != std::string::npos);
  }
}

TEST_CASE("launcher: bad environments get errors that name the variable") {
  {
    EnvScope env{};
    auto li = detect_launch();
    REQUIRE_FALSE(li.ok());
    CHECK(li.status().message().find("no launcher") != std::string::npos);
  }
  {
    EnvScope env{{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
    auto li = detect_launch();
    REQUIRE_FALSE(li.ok());
    CHECK(li.status().message().find("rank 4") != std::string::npos);
  }
  {
    EnvScope env{{"RANK", "x"}, {"WORLD_SIZE", "4"}};
    auto li = detect_launch();
    REQUIRE_FALSE(li.ok());
    CHECK(li.status().message().find("RANK") != std::string::npos);
  }
}
