def decode(datagram, baseline):
    raise NotImplementedError
