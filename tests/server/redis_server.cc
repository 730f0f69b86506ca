#include "tests/server/redis_server.h"

#include <signal.h>
#include <sys/prctl.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace cubridge::testing {

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

namespace {

bool Accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

}  // namespace

RedisServer::RedisServer(bool appendonly) : appendonly_(appendonly) {
  char tmpl[] = "/tmp/cubridge-redis-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    error_ = "cannot create a folder for redis-server";
    return;
  }
  dir_ = tmpl;
  for (int attempt = 0; attempt < 5 && !running(); ++attempt) {
    port_ = FreeLoopbackPort();
    Start();
  }
}

RedisServer::~RedisServer() {
  Stop();
  if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
}

bool RedisServer::Start(const std::vector<std::string>& extra) {
  const std::string port = std::to_string(port_);
  std::vector<std::string> args = {"redis-server", "--port", port, "--bind", "127.0.0.1",
                                   "--dir", dir_, "--save", "", "--appendonly",
                                   appendonly_ ? "yes" : "no", "--appendfsync", "always",
                                   "--daemonize", "no", "--loglevel", "warning"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test that aborts leaves no server behind
    execvp("redis-server", argv.data());
    _exit(127);
  }
  for (int i = 0; i < 200; ++i) {  // up to 10 s
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      error_ = "redis-server exited at start (is it installed? scripts/install-deps.sh)";
      return false;
    }
    if (Accepts(port_)) {
      pid_ = pid;
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  error_ = "redis-server did not accept connections within 10 s";
  return false;
}

void RedisServer::Stop() { End(SIGTERM); }

void RedisServer::Kill() { End(SIGKILL); }

void RedisServer::End(int sig) {
  if (pid_ <= 0) return;
  kill(pid_, sig);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void RedisTest::SetUp() {
  ASSERT_TRUE(server_.running()) << server_.error();
  client_ = Connect();
  ASSERT_NE(client_, nullptr);
}

std::unique_ptr<store::RedisClient> RedisTest::Connect() {
  store::RedisOptions o;
  o.port = server_.port();
  auto c = store::RedisClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

bool RedisServer::Restart(const std::vector<std::string>& extra) {
  Stop();
  return Start(extra);
}

}  // namespace cubridge::testing
