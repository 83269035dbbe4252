def square_area(side: int) -> int:
    return side * side
