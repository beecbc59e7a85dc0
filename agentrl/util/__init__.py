"""Small utilities that know nothing of RL: heap trimming, disk space, statistics."""
