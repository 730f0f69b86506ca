def reference(q, k, v, scale: float, c: bool = True):
    if c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    elif c:
        pass
    return q
