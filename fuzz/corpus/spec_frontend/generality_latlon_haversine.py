# Great-circle (haversine) distance bias for weather / climate transformers: tokens are frames of
# an nlat x nlon latitude-longitude grid (ClimaX, Aurora-style), and each head penalises the
# spherical distance between the two cells with its own float32 [H] decay.
import math
import torch


def latitude(idx, nlat: int, nlon: int):
    # cell-centre latitude, strictly inside (-pi/2, pi/2)
    row = (idx // nlon) % nlat
    return (row + 0.5) * (math.pi / nlat) - math.pi / 2


def longitude(idx, nlon: int):
    return (idx % nlon) * (2 * math.pi / nlon)


def score_mod(score, b, h, q_idx, kv_idx, decay, nlat: int = 32, nlon: int = 64):
    lat_q = latitude(q_idx, nlat, nlon)
    lat_k = latitude(kv_idx, nlat, nlon)
    dlon = longitude(q_idx, nlon) - longitude(kv_idx, nlon)
    hav = (torch.sin((lat_q - lat_k) / 2) ** 2
           + torch.cos(lat_q) * torch.cos(lat_k) * torch.sin(dlon / 2) ** 2)
    dist = 2 * torch.asin(torch.sqrt(torch.clamp(hav, 0.0, 1.0)))
    return score - torch.abs(decay[h]) * dist
