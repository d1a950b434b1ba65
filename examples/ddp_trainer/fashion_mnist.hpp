// Fashion-MNIST from its gzipped IDX files (Debian's dataset-fashion-mnist installs them in
// /usr/share/datasets/fashion-mnist): images as float32 [n, 1, 28, 28] scaled to [0, 1] and
// normalised, labels as int64 [n]. A missing, truncated or malformed file is an error that
// names the file and what is wrong.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace trainer {

struct Split {
  torch::Tensor images;  // float32 [n, 1, 28, 28]
  torch::Tensor labels;  // int64 [n]
};

namespace detail {

// The whole decompressed content of `path`.
inline std::vector<uint8_t> gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(path + ": cannot open (missing? install dataset-fashion-mnist or pass --data DIR)");
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int err = 0;
      const std::string what = gzerror(f, &err);
      gzclose(f);
      throw std::runtime_error(path + ": not a readable gzip file (" + what + ")");
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  // A gzip stream cut short reads as a short file without an error from gzread: gzclose says so.
  const int rc = gzclose(f);
  if (rc == Z_BUF_ERROR) throw std::runtime_error(path + ": truncated gzip stream");
  return out;
}

inline uint32_t be32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) | uint32_t{b[at + 3]};
}

// An IDX file of unsigned bytes with `dims` dimensions: its sizes and where the data starts.
inline std::vector<int64_t> idx_header(const std::vector<uint8_t>& b, const std::string& path, int dims) {
  const size_t header = 4 + 4 * static_cast<size_t>(dims);
  if (b.size() < header)
    throw std::runtime_error(path + ": truncated (" + std::to_string(b.size()) + " bytes, no IDX header)");
  const uint32_t magic = be32(b, 0);
  const uint32_t want = 0x00000800u | static_cast<uint32_t>(dims);  // unsigned byte data, `dims` dimensions
  if (magic != want)
    throw std::runtime_error(path + ": wrong magic number " + std::to_string(magic) + " (an IDX file of " +
                             std::to_string(dims) + " dimensions has " + std::to_string(want) + ")");
  std::vector<int64_t> sizes;
  size_t total = 1;
  for (int d = 0; d < dims; ++d) {
    sizes.push_back(be32(b, 4 + 4 * static_cast<size_t>(d)));
    total *= static_cast<size_t>(sizes.back());
  }
  if (b.size() != header + total)
    throw std::runtime_error(path + ": " + (b.size() < header + total ? "truncated" : "longer than its header says") +
                             " (" + std::to_string(b.size() - header) + " data bytes, the header says " +
                             std::to_string(total) + ")");
  return sizes;
}

}  // namespace detail

// `split` is "train" or "t10k".
inline Split load_fashion_mnist(const std::string& dir, const std::string& split) {
  const std::string ipath = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string lpath = dir + "/" + split + "-labels-idx1-ubyte.gz";
  auto ib = detail::gunzip(ipath);
  auto lb = detail::gunzip(lpath);
  const auto isz = detail::idx_header(ib, ipath, 3);
  const auto lsz = detail::idx_header(lb, lpath, 1);
  if (isz[1] != 28 || isz[2] != 28)
    throw std::runtime_error(ipath + ": images of " + std::to_string(isz[1]) + "x" + std::to_string(isz[2]) +
                             ", not 28x28");
  if (isz[0] != lsz[0])
    throw std::runtime_error(ipath + " has " + std::to_string(isz[0]) + " images but " + lpath + " " +
                             std::to_string(lsz[0]) + " labels");
  auto images = torch::from_blob(ib.data() + 16, {isz[0], 1, 28, 28}, torch::kUInt8).to(torch::kFloat32).div_(255.0);
  images.sub_(0.2860).div_(0.3530);  // Fashion-MNIST's mean and standard deviation
  auto labels = torch::from_blob(lb.data() + 8, {lsz[0]}, torch::kUInt8).to(torch::kInt64);
  if (labels.max().item<int64_t>() > 9) throw std::runtime_error(lpath + ": a label above 9");
  return {images, labels};
}

}  // namespace trainer
