"""A shop: carts and orders. The word Cart in a docstring is not a use."""

from dataclasses import dataclass
from decimal import Decimal

TAX_RATE = Decimal("0.2")
registry = {}


@dataclass
class Item:
    name: str
    price: Decimal


class Cart:
    currency = "EUR"

    def __init__(self):
        self.items: list[Item] = []

    def add(self, item: Item) -> "Cart":
        self.items.append(item)
        return self

    @property
    def total(self) -> Decimal:
        return sum(i.price for i in self.items) * (1 + TAX_RATE)


def checkout(cart: Cart) -> Decimal:
    # TODO: apply discounts before cart.add is called again
    cart.add(Item("gift", Decimal(0)))
    return cart.total


if __name__ == "__main__":
    BASKET = Cart()
    print(checkout(BASKET), "Cart")
