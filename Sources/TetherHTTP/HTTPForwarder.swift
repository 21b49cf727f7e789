public import Tether
