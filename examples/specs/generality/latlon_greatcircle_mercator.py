# Spherical-grid bias, second form: central angle by the spherical law of cosines (torch.acos) plus
# the difference of Mercator y = log(tan(pi/4 + lat/2)) coordinates, weighted per head by a
# float32 [2, H] tensor. Weather / geospatial transformers on lat-lon grids (GraphCast inputs).
import math
import torch


def latitude(idx, nlat: int, nlon: int):
    row = (idx // nlon) % nlat
    return (row + 0.5) * (math.pi / nlat) - math.pi / 2


def mercator_y(lat):
    return torch.log(torch.tan(math.pi / 4 + lat / 2))


def score_mod(score, b, h, q_idx, kv_idx, w, nlat: int = 32, nlon: int = 64):
    lat_q = latitude(q_idx, nlat, nlon)
    lat_k = latitude(kv_idx, nlat, nlon)
    dlon = (q_idx % nlon - kv_idx % nlon) * (2 * math.pi / nlon)
    cos_c = (torch.sin(lat_q) * torch.sin(lat_k)
             + torch.cos(lat_q) * torch.cos(lat_k) * torch.cos(dlon))
    central = torch.acos(torch.clamp(cos_c, -1.0, 1.0))
    north_south = torch.abs(mercator_y(lat_q) - mercator_y(lat_k))
    return score - torch.abs(w[0, h]) * central - torch.abs(w[1, h]) * north_south
